"""The breaker's memory in the store: a run's taints read back, and the files marked private.

Both live in the store (owner-only, hidden from every sandbox), never in the workspace, where
a command could change them:

- :func:`recorded`: the ``taint`` events of one run, read back from the signed record, so a
  run's taint survives the calls, processes and servers that carry its steps.
- :class:`PrivateFiles`: the sidecar. A file a run wrote while it held private data is kept
  here by workspace (its real path) and path (relative to it, normalised, no trailing
  ``/``); the next run that reads it starts with private data in hand. A mark goes when a
  watched command deletes the file; a later write does not clear it.

The sidecar's table is made on first use (``CREATE TABLE IF NOT EXISTS``): a store an older
Stockade made gains it, and an older Stockade ignores it.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import Store

_TABLE = """
CREATE TABLE IF NOT EXISTS private_files (
    workspace TEXT NOT NULL,
    path TEXT NOT NULL,
    run_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    time REAL NOT NULL,
    PRIMARY KEY (workspace, path)
)
"""


def recorded(
    store: Store, run_id: str, after: int | None = None
) -> tuple[list[tuple[str, str, str]], int]:
    """The taints of run ``run_id`` recorded after event ``after``, oldest first, as
    ``(taint, source, detail)``, and the last event number looked at (to pass as ``after``
    next time: a long run is read once, not at every step). ``after=None``: all of them,
    through the run's index (the number given back is then 0)."""
    import json

    if after is None:
        with store.locked():
            found = store.connection.execute(
                "SELECT seq, body FROM events WHERE run_id = ? AND kind = 'taint' ORDER BY seq",
                (run_id,),
            ).fetchall()
        return [_fields(json.loads(body)) for _seq, body in found], 0
    with store.locked():
        # One walk of the sequence since the last look (not the run's index): the rows of
        # every run, the bodies of this run's taints only.
        found = store.connection.execute(
            "SELECT seq, CASE WHEN run_id = ? AND kind = 'taint' THEN body END FROM events"
            " WHERE seq > ? ORDER BY seq",
            (run_id, after),
        ).fetchall()
    taints = [_fields(json.loads(body)) for _seq, body in found if body is not None]
    return taints, int(found[-1][0]) if found else after


def _fields(event: dict[str, object]) -> tuple[str, str, str]:
    return str(event["taint"]), str(event["source"]), str(event["detail"])


class PrivateFiles:
    """The sidecar of files marked private, in ``store``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        with _errors("make"), store.locked(), store.connection:
            store.connection.execute(_TABLE)

    def mark(self, workspace: str, paths: Iterable[str], *, run_id: str, step: int) -> None:
        """Mark ``paths`` (relative to ``workspace``) private: written by ``run_id``'s
        ``step`` while the run held private data."""
        now = time.time()
        rows = [(workspace, path, run_id, step, now) for path in paths]
        if rows:
            with _errors("mark files in"), self.store.locked(), self.store.connection as db:
                db.executemany("INSERT OR REPLACE INTO private_files VALUES (?, ?, ?, ?, ?)", rows)

    def forget(self, workspace: str, paths: Iterable[str]) -> None:
        """Drop the marks of ``paths`` (deleted files) and of everything under them."""
        with _errors("unmark files in"), self.store.locked(), self.store.connection as db:
            for path in paths:
                db.execute(
                    "DELETE FROM private_files WHERE workspace=? AND (path=? OR path LIKE ?"
                    " ESCAPE '\\')",
                    (workspace, path, _under(path)),
                )

    def drop(self, workspace: str) -> None:
        """Drop every mark of ``workspace`` (a fork discarded: its files are gone)."""
        with _errors("unmark files in"), self.store.locked(), self.store.connection as db:
            db.execute("DELETE FROM private_files WHERE workspace=?", (workspace,))

    def rows(self, workspace: str) -> list[tuple[str, str, int]]:
        """Every mark of ``workspace``: its path, and the run and step that wrote it."""
        with _errors("read"), self.store.locked():
            found = self.store.connection.execute(
                "SELECT path, run_id, step FROM private_files WHERE workspace=? ORDER BY path",
                (workspace,),
            ).fetchall()
        return [(str(p), str(r), int(s)) for p, r, s in found]

    def named(self, workspace: str, paths: Iterable[str]) -> list[str]:
        """The marked files among ``paths`` (relative to ``workspace``; ``""`` is the
        workspace itself) or under one of them, sorted."""
        found: set[str] = set()
        with _errors("read"), self.store.locked():
            db = self.store.connection
            for path in paths:
                if not path:
                    rows = db.execute(
                        "SELECT path FROM private_files WHERE workspace=?", (workspace,)
                    ).fetchall()
                else:
                    rows = db.execute(
                        "SELECT path FROM private_files WHERE workspace=? AND (path=? OR path"
                        " LIKE ? ESCAPE '\\')",
                        (workspace, path, _under(path)),
                    ).fetchall()
                found.update(row[0] for row in rows)
        return sorted(found)


@contextlib.contextmanager
def _errors(what: str) -> Iterator[None]:
    """A failing sidecar as the store's own error, naming what could not be done."""
    from .store import StoreError

    try:
        yield
    except sqlite3.Error as error:
        raise StoreError(
            f"cannot {what} the private-files sidecar: {error}",
            hint="check the store's storage; the breaker cannot tell which files are private",
        ) from None


def _under(folder: str) -> str:
    """A ``LIKE`` pattern for every path below ``folder``, its wildcards escaped."""
    escaped = folder.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "/%"
