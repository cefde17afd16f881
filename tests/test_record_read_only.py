"""What only reads the record (``verify``, ``log``, ``show``, ``replay``) leaves it exactly as
it found it, and never makes an empty store where the record should be.

The attack: the whole store removed (with its head and key) used to pass ``verify`` as a
record of no events, because opening it made a new, empty one. The controls: the same
commands see a store the writing open has just migrated (so the tests can see a write),
and the writing open does change the file they leave untouched."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from helpers.store import cli, sql
from stockade.errors import StockadeError
from stockade.record.store import Store

READERS = ("verify", "log", "show", "replay")


def _argv(command: str, run: str) -> list[str]:
    """``command`` as a person would ask it of run ``run``."""
    return {"show": ["show", run, "1"], "replay": ["replay", run]}.get(command, [command])


def _digests(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` but SQLite's shared-memory side files, by content."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.endswith(("-shm", "-wal"))
    }


@pytest.mark.parametrize("command", READERS)
def test_a_removed_store_is_an_error_and_none_is_made(recorded, env, command):
    store, run = recorded
    folder = store.parent
    assert cli("verify", env=env).returncode == 0  # the control: the record verifies
    shutil.rmtree(folder)
    said = cli(*_argv(command, run), env=env)
    assert said.returncode != 0
    assert f"error[store]: there is no record at {store}" in said.stderr
    assert "store.path" in said.stderr
    assert not folder.exists()  # nothing made: not the store, not its folder


def test_verify_names_a_removed_store_in_its_json(recorded, env):
    store, _run = recorded
    shutil.rmtree(store.parent)
    said = cli("verify", "--json", env=env)
    assert said.returncode != 0
    error = json.loads(said.stdout)["error"]
    assert (error["code"], error["message"]) == ("store", f"there is no record at {store}")


@pytest.mark.parametrize("command", READERS)
def test_reading_the_record_changes_no_byte_of_it(recorded, env, command):
    store, run = recorded
    before = _digests(store.parent)
    assert {"store.db", "signing.key"} <= set(before)
    said = cli(*_argv(command, run), env=env)
    assert said.returncode == 0, said.stderr
    assert _digests(store.parent) == before


def test_an_older_store_is_read_by_none_of_them_and_left_as_it_is(recorded, env):
    store, run = recorded
    sql(store, "UPDATE meta SET value='1' WHERE key='schema'")
    before = _digests(store.parent)
    for command in READERS:
        said = cli(*_argv(command, run), env=env)
        assert said.returncode != 0
        assert "older than this Stockade's" in said.stderr, said.stderr
        assert "to upgrade it" in said.stderr
    assert _digests(store.parent) == before
    # The control: the writing open migrates the same file, and the digests see it.
    Store(str(store)).close()
    assert _digests(store.parent) != before
    assert cli("verify", env=env).returncode == 0


def test_a_file_that_is_no_store_is_named_and_left_alone(tmp_path):
    path = tmp_path / "store.db"
    path.write_bytes(b"not sqlite at all\n" * 100)
    with pytest.raises(StockadeError, match="cannot read the store") as caught:
        Store(str(path), read_only=True)
    assert caught.value.hint
    assert path.read_bytes() == b"not sqlite at all\n" * 100
    folder = tmp_path / "folder.db"
    folder.mkdir()
    with pytest.raises(StockadeError, match="there is no record at"):
        Store(str(folder), read_only=True)


def test_a_read_only_store_refuses_a_write(recorded):
    store, _run = recorded
    reader = Store(str(store), read_only=True)
    try:
        with pytest.raises(sqlite3.OperationalError, match=r"readonly|read-only"):
            reader.connection.execute("DELETE FROM events")
    finally:
        reader.close()


def test_a_copy_in_a_folder_that_cannot_be_written_is_read(recorded, env, tmp_path):
    """A record copied (store, key, head, blobs; no write-ahead log) into a folder no one
    may write, as an auditor keeps it: read as an immutable file, where SQLite's read-only
    open alone needs to make its shared-memory file there (the control)."""
    import subprocess
    from urllib.request import pathname2url

    store, _run = recorded
    assert cli("verify", env=env).returncode == 0
    copy = tmp_path / "audit"
    shutil.copytree(store.parent, copy, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
    config = tmp_path / "audit.toml"
    config.write_text(f'[store]\npath = "{copy / "store.db"}"\n')
    mounted = os.geteuid() == 0  # root writes any folder: a read-only mount instead
    if mounted:
        subprocess.run(["mount", "--bind", str(copy), str(copy)], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(copy)], check=True)
    else:
        copy.chmod(0o500)
    try:
        plain = sqlite3.connect(f"file:{pathname2url(str(copy / 'store.db'))}?mode=ro", uri=True)
        with pytest.raises(sqlite3.OperationalError):  # the control: no -shm can be made
            plain.execute("SELECT count(*) FROM events").fetchone()
        plain.close()
        said = cli("--config", str(config), "verify", env=env)
        assert said.returncode == 0, said.stderr
        assert said.stdout.startswith("ok: 9 events")
        assert cli("--config", str(config), "log", env=env).returncode == 0
    finally:
        if mounted:
            subprocess.run(["umount", str(copy)], check=True)
        else:
            copy.chmod(0o700)
