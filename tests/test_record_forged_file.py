"""The store file's own parts, rebuilt by hand without the key (an attack review's cases):
an index whose entries are not its table's, a view or trigger on the events table, columns
of another type, every event removed with the head, a side file hard-linked to the key.
Each is named by ``verify`` (or refused by the readers), where the untouched store passes
and reads true (the control)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from helpers.store import check, cli, sql
from stockade.errors import StockadeError
from stockade.record.chain import head_path, key_path, rows
from stockade.record.store import Store
from stockade.record.verify import verify


def _forge_index(store: Path, name: str, expression: str, shown: str) -> None:
    """Rebuild index ``name`` from ``expression``, then make the schema name ``shown``."""
    db = sqlite3.connect(store, isolation_level=None)
    db.execute(f"DROP INDEX IF EXISTS {name}")
    db.execute(f"CREATE INDEX {name} ON events ({expression})")
    db.execute("PRAGMA writable_schema=ON")
    db.execute("UPDATE sqlite_master SET sql=? WHERE name=?", (shown, name))
    db.execute("PRAGMA writable_schema=OFF")
    db.close()


def test_an_index_rebuilt_to_file_one_runs_events_under_another_is_caught(recorded, env):
    store, run = recorded
    reader = Store(str(store), read_only=True)
    truth = [(r.seq, r.run_id) for r in rows(reader, run)]
    reader.close()
    assert check(store).ok and len(truth) == 9  # the control
    _forge_index(
        store,
        "events_step",
        "CASE WHEN seq > 6 THEN 'elsewhere' ELSE run_id END, step",
        "CREATE INDEX events_step ON events (run_id, step)",
    )
    lied = sqlite3.connect(store).execute("SELECT seq FROM events WHERE run_id=?", (run,))
    assert len(lied.fetchall()) == 6  # the index answers with other rows than the table
    verdict = check(store)
    assert not verdict.ok
    assert any("integrity check" in p.text for p in verdict.problems), verdict.problems
    reader = Store(str(store), read_only=True)
    assert [(r.seq, r.run_id) for r in rows(reader, run)] == truth  # read past the index
    reader.close()
    said = cli("log", "--run", run, env=env)
    assert said.returncode == 0 and said.stdout.count("\n") == 3  # its three steps


@pytest.mark.parametrize(
    "planted",
    [
        "CREATE INDEX events_kind ON events (kind)",
        "CREATE TRIGGER quiet AFTER INSERT ON events BEGIN SELECT 1; END",
    ],
)
def test_anything_else_on_the_events_table_is_named(recorded, planted):
    store, _run = recorded
    sql(store, planted)
    verdict = check(store)
    name = planted.split()[2]
    assert not verdict.ok and any(name in p.text for p in verdict.problems), verdict.problems
    sql(store, f"DROP {planted.split()[1]} {name}")
    assert check(store).ok  # the control: taken away, the store verifies


def test_a_view_in_the_events_tables_place_is_named(recorded):
    store, _run = recorded
    db = sqlite3.connect(store)
    with db:
        db.execute("ALTER TABLE events RENAME TO kept")
        db.execute("CREATE VIEW events AS SELECT * FROM kept WHERE seq < 9")
    db.close()
    reader = Store(str(store), read_only=True)  # (the writing open cannot index a view)
    verdict = verify(reader)
    reader.close()
    assert not verdict.ok
    assert any("view events" in p.text for p in verdict.problems), verdict.problems


@pytest.mark.parametrize(
    ("column", "value"),
    [("sig", 10**15), ("seq", "5"), ("body", b"{}"), ("step", 1.5), ("hash", b"x")],
)
def test_a_column_of_another_type_is_named_not_crashed_on(recorded, env, column, value):
    store, _run = recorded
    db = sqlite3.connect(store)
    with db:
        if column == "seq":  # the key column: the table rebuilt with text numbers
            columns = "seq TEXT, run_id, step, action_id, kind, time, body, prev, hash, sig"
            db.execute(f"CREATE TABLE copy ({columns})")
            db.execute("INSERT INTO copy SELECT * FROM events")
            db.execute("DROP TABLE events")
            db.execute("ALTER TABLE copy RENAME TO events")
            db.execute("UPDATE events SET seq=CAST(seq AS TEXT) WHERE seq=5")
        else:
            db.execute(f"UPDATE events SET {column}=? WHERE seq=5", (value,))  # noqa: S608
    db.close()
    verdict = check(store)
    assert not verdict.ok
    assert any(f"{column} column holds a" in p.text for p in verdict.problems), verdict.problems
    said = cli("verify", env=env)
    assert said.returncode == 1 and "Traceback" not in said.stderr


def test_every_event_removed_with_its_head_fails(recorded, env):
    store, _run = recorded
    sql(store, "DELETE FROM events")
    os.unlink(head_path(Store(str(store), read_only=True)))
    verdict = check(store)
    assert not verdict.ok and verdict.key_file
    assert [p.text for p in verdict.problems] == [
        "the record holds no events, but its key was pinned by its first"
    ]
    assert cli("verify", env=env).returncode == 1


@pytest.mark.parametrize("target", ["key", "head", "blob"])
def test_a_side_file_linked_to_another_is_refused_and_nothing_is_written(recorded, env, target):
    store, _run = recorded
    reader = Store(str(store), read_only=True)
    victim = {
        "key": Path(key_path(reader)),
        "head": Path(head_path(reader)),
        "blob": next(p for p in (store.parent / "blobs").rglob("*") if p.is_file()),
    }[target]
    reader.close()
    before = victim.read_bytes()
    for side in ("store.db-shm", "store.db-wal"):
        (store.parent / side).unlink(missing_ok=True)
    os.link(victim, store.parent / "store.db-shm")
    for command in ("verify", "log"):
        said = cli(command, env=env)
        assert said.returncode != 0 and "is a hard link: refused" in said.stderr, said.stderr
    assert victim.read_bytes() == before
    (store.parent / "store.db-shm").unlink()
    assert cli("verify", env=env).returncode == 0  # the control


def test_a_malformed_body_or_schema_value_is_a_structured_error(recorded, env):
    store, run = recorded
    sql(store, "UPDATE events SET body='{x' WHERE seq=2")
    said = cli("log", env=env)
    assert said.returncode != 0 and "error[store]: event 2 of the record" in said.stderr
    assert "Traceback" not in said.stderr
    sql(store, "UPDATE meta SET value='two' WHERE key='schema'")
    for command in (["verify"], ["log"], ["replay", run]):
        said = cli(*command, env=env)
        assert said.returncode != 0 and "schema is version 'two'" in said.stderr, said.stderr
    with pytest.raises(StockadeError, match="schema is version 'two'"):
        Store(str(store), read_only=True)
