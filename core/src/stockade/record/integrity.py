"""The store file's own integrity, which ``stockade verify`` checks before the chain.

The chain's links and signatures bind every event's columns, but not the file's other
parts, which anyone who can write the store can rebuild by hand (``PRAGMA
writable_schema``): an index whose entries do not match its table answers a query with
other rows than the table holds (an anchor hidden, one run's events as another's), a view
or a trigger put in the events table's place, a column holding another type than the one
written (a signature that is a huge integer). So the events table's schema must be
exactly what Stockade makes, SQLite's own ``integrity_check`` must pass (it compares every
index with its table), and every row's columns must hold the types written, before their
values are read.
"""

from __future__ import annotations

import sqlite3
from typing import Any

COLUMNS: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("seq", int),
    ("body", str),
    ("prev", str),
    ("hash", str),
    ("sig", bytes),
    ("run_id", str),
    ("step", int),
    ("action_id", str),
    ("kind", str),
    ("time", (int, float)),
)
"""The columns :func:`~stockade.record.verify.verify` reads, in its order, and their types."""
LISTED = 5  # integrity_check's messages listed at most


def schema_problems(db: sqlite3.Connection, schema: str) -> list[str]:
    """How the events table's schema (the table, its indexes, any view or trigger on it)
    and the file's integrity differ from what ``schema`` (the store's script) makes."""
    made = sqlite3.connect(":memory:")
    try:
        made.executescript(schema)
        expected = set(_objects(made))
    finally:
        made.close()
    problems = [
        f"the store's {kind} {name} on the events table is not one Stockade makes ({sql!r})"
        for kind, name, sql in sorted(set(_objects(db)) - expected, key=str)
    ]
    problems += [
        f"the store's {kind} {name} is missing or was changed"
        for kind, name, _sql in sorted(expected - set(_objects(db)), key=str)
    ]
    said = [str(row[0]) for row in db.execute(f"PRAGMA integrity_check({LISTED})").fetchall()]
    if said != ["ok"]:
        problems.append(
            "the store file fails SQLite's integrity check (an index or page rewritten by"
            f" hand, or damage): {'; '.join(said)[:400]}"
        )
    return problems


def _objects(db: sqlite3.Connection) -> list[tuple[str, str, str]]:
    return [  # the text as written, its spacing aside
        (str(kind), str(name), " ".join(str(sql).split()))
        for kind, name, sql in db.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE tbl_name='events'"
        ).fetchall()
    ]


def shape_problems(found: list[tuple[Any, ...]]) -> list[str]:
    """Each row whose columns do not hold the types they are written with (up to
    :data:`LISTED`, then how many more)."""
    problems: list[str] = []
    bad = 0
    for row in found:
        for (name, kind), value in zip(COLUMNS, row, strict=True):
            if not isinstance(value, kind) or isinstance(value, bool):
                bad += 1
                if len(problems) < LISTED:
                    problems.append(
                        f"event {row[0]!r}'s {name} column holds a {type(value).__name__}, not"
                        " what Stockade writes there: the store was changed outside Stockade"
                    )
                break
    if bad > LISTED:
        problems.append(f"... and {bad - LISTED} more events with columns of another type")
    return problems
