"""Events appended in one transaction (``Chain.append_many``, ``Recorder.batch``) and the
``placement`` event: the chain they make verifies, each event is linked and signed as one
appended alone, a failed batch leaves nothing, and ``stockade log`` and ``replay`` show the
placement."""

from __future__ import annotations

import argparse
import sqlite3
import threading
from pathlib import Path

import pytest

from stockade.cli.record import log_command, replay_command, steps
from stockade.config.schema import Config, StoreConfig
from stockade.record.chain import Chain, rows
from stockade.record.events import ActionEvent, ErrorEvent, PlacementEvent
from stockade.record.recorder import Recorder
from stockade.record.store import Store, StoreError
from stockade.record.verify import verify


def _action(action_id: str, step: int) -> ActionEvent:
    return ActionEvent(
        action_id, ("true",), cwd="/", mode="read-only", origin="api", profile="default",
        run_id="run-b", step=step,
    )  # fmt: skip


def _three(step: int) -> list[ActionEvent | PlacementEvent | ErrorEvent]:
    action_id = f"a{step}"
    return [
        _action(action_id, step),
        PlacementEvent(action_id, node="n1", actor="w1", hostname="box"),
        ErrorEvent(action_id, "worker_lost", message="gone"),
    ]


def test_append_many_makes_the_same_chain_as_one_by_one(tmp_path: Path) -> None:
    one = Chain(Store(str(tmp_path / "one" / "store.db")))
    many = Chain(Store(str(tmp_path / "many" / "store.db")))
    events = [event for step in range(1, 6) for event in _three(step)]
    for event in events:
        one.append(event)
    assert many.append_many(events[:4]) == [1, 2, 3, 4]
    assert many.append_many(events[4:]) == list(range(5, 16))
    assert many.append_many([]) == []
    for chain in (one, many):
        verdict = verify(chain.store)
        assert verdict.ok, verdict.problems
        assert verdict.events == verdict.signatures == 15
    bodies = [[(r.seq, r.run_id, r.step, r.kind) for r in rows(c.store)] for c in (one, many)]
    assert bodies[0] == bodies[1]
    one.close()
    many.close()


def test_a_failed_batch_leaves_nothing(tmp_path: Path) -> None:
    chain = Chain(Store(str(tmp_path / "store.db")))
    chain.append_many(_three(1))
    # A trigger refuses the batch's third event: the insert fails, the batch rolls back.
    with chain.store.locked():
        chain.store.connection.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON events WHEN NEW.action_id = 'a2' AND "
            "NEW.kind = 'error' BEGIN SELECT RAISE(ABORT, 'planted'); END"
        )
    with pytest.raises(StoreError, match=r"cannot record the action event.*planted"):
        chain.append_many(_three(2))
    with chain.store.locked():
        count = chain.store.connection.execute("SELECT count(*) FROM events").fetchone()[0]
    assert count == 3  # the three before; none of the batch
    assert chain.append_many(_three(3)) == [4, 5, 6]  # the chain goes on from where it was
    assert verify(chain.store).ok
    chain.close()


def _recorder(tmp_path: Path, *, fail_closed: bool = True) -> Recorder:
    path = str(tmp_path / "state" / "store.db")
    return Recorder(Config(store=StoreConfig(path=path, fail_closed=fail_closed)), {})


def _count(recorder: Recorder) -> int:
    store = recorder.chain().store
    with store.locked():
        return int(store.connection.execute("SELECT count(*) FROM events").fetchone()[0])


def test_a_batch_is_stored_when_it_ends_and_other_threads_are_not_held(tmp_path: Path) -> None:
    recorder = _recorder(tmp_path)
    with recorder.batch():
        for event in _three(1):
            recorder.stockade_record(event)
        assert _count(recorder) == 0  # kept until the block ends
        other = threading.Thread(target=recorder.stockade_record, args=(_action("x", 9),))
        other.start()
        other.join()
        assert _count(recorder) == 1  # another thread's event went straight in
        with pytest.raises(RuntimeError, match="do not nest"), recorder.batch():
            pass
    assert _count(recorder) == 4
    with pytest.raises(ValueError, match="boom"), recorder.batch():
        recorder.stockade_record(_three(2)[0])
        raise ValueError("boom")
    assert _count(recorder) == 5  # what was recorded before the exception is kept
    assert verify(recorder.chain().store).ok
    recorder.close()


@pytest.mark.parametrize("fail_closed", [True, False])
def test_a_batch_that_cannot_be_stored_fails_closed_or_warns(
    tmp_path: Path, fail_closed: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    recorder = _recorder(tmp_path, fail_closed=fail_closed)
    recorder.stockade_record(_action("first", 1))
    with sqlite3.connect(str(tmp_path / "state" / "store.db")) as db:
        db.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'x'); END"
        )
    if fail_closed:
        with pytest.raises(StoreError), recorder.batch():
            recorder.stockade_record(_action("second", 2))
    else:
        with recorder.batch():
            recorder.stockade_record(_action("second", 2))
            recorder.stockade_record(_action("third", 3))
        assert "2 events (action) not recorded" in capfd.readouterr().err
    assert _count(recorder) == 1
    recorder.close()


def test_log_shows_where_a_placed_step_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    chain = Chain(Store(str(tmp_path / "state" / "stockade" / "store.db")))
    chain.append_many([_action("here", 1), *_three(2)])
    found = steps(rows(chain.store))
    assert "node" not in found[0]
    assert (found[1]["node"], found[1]["actor"], found[1]["state"]) == ("n1", "w1", "error")
    chain.close()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("STOCKADE_CONFIG", raising=False)
    assert log_command(argparse.Namespace(config=None, run=None, json=False)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert "[node" not in lines[0]
    assert lines[1].endswith("[node box:n1 actor w1]")


def test_replay_gives_the_placement_a_line_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    chain = Chain(Store(str(tmp_path / "state" / "stockade" / "store.db")))
    chain.append_many([_action("here", 1), *_three(2)])
    chain.close()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("STOCKADE_CONFIG", raising=False)
    args = argparse.Namespace(config=None, run="run-b", json=False, redact=False)
    assert replay_command(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[4] for line in lines] == ["action", "action", "placement", "error"]
    assert lines[2].endswith("placement  carried out on node n1 (box), actor w1")
