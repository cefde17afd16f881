"""``stockade log`` and ``show`` read the shards too: a sharded pool's runs are recorded in
chains of their own beside the main store (``shards/NAME/store.db``), each with its own
output blobs. Two real commands are recorded, one in the main store and one in a shard;
the log lists both in the order they ran, ``--run`` picks the shard's alone, and ``show``
prints the shard's step's output from the shard's own blob."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from stockade.cli.record import log_command, replay_command, show_command
from stockade.config.schema import Config, StoreConfig
from stockade.host import Host
from stockade.record.chain import Chain
from stockade.record.events import AnchorEvent
from stockade.record.shards import head_of
from stockade.record.store import Store
from stockade.request.spec import ExecRequest


def _ran(store: Path, text: str, cwd: Path) -> str:
    host = Host(Config(store=StoreConfig(path=str(store))))
    try:
        result = host.run(ExecRequest(("echo", text), str(cwd), mode="danger-full-access"))
        assert result.exit_code == 0
        return host.run_id
    finally:
        host.close()


def _anchor(state: Path, name: str) -> None:
    """Anchor shard ``name``'s head in the main chain, as the pool's record does."""
    main, shard = Store(str(state / "store.db")), Store(str(state / "shards" / name / "store.db"))
    try:
        seq, digest, key = head_of(shard)
        chain = Chain(main)
        event = AnchorEvent(
            f"anchor-{name}-{seq}", shard=name, seq=seq, hash=digest, public_key=key
        )
        chain.append_many([event])
        chain.close()
    finally:
        shard.close()
        main.close()


def test_log_and_show_read_the_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state" / "stockade"
    main = _ran(state / "store.db", "from-main", tmp_path)
    sharded = _ran(state / "shards" / "s0" / "store.db", "from-shard", tmp_path)
    _anchor(state, "s0")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("STOCKADE_CONFIG", raising=False)

    assert log_command(argparse.Namespace(config=None, run=None, json=False)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [main, sharded]  # in the order they ran
    assert all("exit 0" in line for line in lines)

    assert log_command(argparse.Namespace(config=None, run=sharded, json=False)) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(sharded) and "echo from-shard" in line

    assert show_command(argparse.Namespace(config=None, run=sharded, step=1)) == 0
    assert capsys.readouterr().out == "from-shard\n"  # from the shard's own blob

    replay = argparse.Namespace(config=None, run=sharded, json=True, redact=False)
    assert replay_command(replay) == 0  # the shard's run, its outputs checked in its own blobs
    timeline = json.loads(capsys.readouterr().out)
    assert "result" in [e["kind"] for e in timeline] and "REFUSED" not in str(timeline)


def test_a_shard_folder_without_a_store_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state" / "stockade"
    main = _ran(state / "store.db", "only", tmp_path)
    (state / "shards" / "s9").mkdir(parents=True)  # a folder, nothing in it: not a shard
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("STOCKADE_CONFIG", raising=False)
    assert log_command(argparse.Namespace(config=None, run=None, json=False)) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == [main]
    assert not (state / "shards" / "s9" / "store.db").exists()  # nothing made there


def test_a_shard_no_anchor_names_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder under ``shards/`` that no anchor of the main chain names is no part of the
    record: anyone who can write the store could put a chain of their own there, with a key
    of their own, and ``show`` would print its forged output as a step's. The control: the
    same shard, once anchored, is read."""
    state = tmp_path / "state" / "stockade"
    _ran(state / "store.db", "only", tmp_path)
    forged = _ran(state / "shards" / "zz" / "store.db", "FORGED", tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("STOCKADE_CONFIG", raising=False)
    assert log_command(argparse.Namespace(config=None, run=forged, json=False)) == 0
    assert capsys.readouterr().out == ""
    assert show_command(argparse.Namespace(config=None, run=forged, step=1)) != 0
    assert "FORGED" not in capsys.readouterr().out
    _anchor(state, "zz")  # the control
    assert show_command(argparse.Namespace(config=None, run=forged, step=1)) == 0
    assert capsys.readouterr().out == "FORGED\n"
