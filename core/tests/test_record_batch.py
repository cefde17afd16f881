"""Events appended in one transaction (``Chain.append_many``, ``Recording.batch`` through the
``stockade_record_batch`` seam) and the
``placement`` event: the chain they make verifies, each event is linked and signed as one
appended alone, a failed batch leaves nothing, and ``stockade log`` and ``replay`` show the
placement."""

from __future__ import annotations

import argparse
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import pluggy
import pytest

from stockade import NAME, hookimpl
from stockade.cli.record import log_command, replay_command, steps
from stockade.config.schema import Config, StoreConfig
from stockade.errors import PolicyDenied, PolicyHeld, RecorderFailed
from stockade.plugin import hookspecs
from stockade.plugin.manager import Hooks
from stockade.record.chain import Chain, rows
from stockade.record.events import ActionEvent, ErrorEvent, Event, PlacementEvent
from stockade.record.recorder import Recorder
from stockade.record.recording import Recording
from stockade.record.store import Store, StoreError
from stockade.record.verify import verify
from stockade.request.result import PendingApproval
from stockade.request.spec import ExecRequest
from stockade.request.verdict import Decision

NO = Decision("deny", "the caller's gate says no", by="gate")


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
    planted = verify(chain.store)  # verify names the trigger put on the events table
    assert [p.text for p in planted.problems if "trigger refuse" in p.text] != [], planted
    with chain.store.locked():
        chain.store.connection.execute("DROP TRIGGER refuse")
    assert verify(chain.store).ok
    chain.close()


def _recorder(tmp_path: Path, *, fail_closed: bool = True) -> Recorder:
    path = str(tmp_path / "state" / "store.db")
    return Recorder(Config(store=StoreConfig(path=path, fail_closed=fail_closed)), {})


def _count(recorder: Recorder) -> int:
    store = recorder.chain().store
    with store.locked():
        return int(store.connection.execute("SELECT count(*) FROM events").fetchone()[0])


class OneByOne:
    """A third party's recorder that knows only ``stockade_record``."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    @hookimpl
    def stockade_record(self, event: Event) -> None:
        self.events.append(event)


class Batches:
    """A third party's recorder that takes batches (and one-by-one events, never called)."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    @hookimpl
    def stockade_record_batch(self, events: Sequence[Event]) -> None:
        self.batches.append([event.kind for event in events])

    @hookimpl
    def stockade_record(self, event: Event) -> None:
        raise AssertionError("a recorder that takes batches gets every event through them")


def _recording(recorder: Recorder, *plugins: object) -> Recording:
    pm = pluggy.PluginManager(NAME)
    pm.add_hookspecs(hookspecs)
    for plugin in (recorder, *plugins):
        pm.register(plugin)
    return Recording(Hooks(pm))


def test_a_batch_is_stored_when_it_ends_and_other_threads_are_not_held(tmp_path: Path) -> None:
    recorder, single, batches = _recorder(tmp_path), OneByOne(), Batches()
    recording = _recording(recorder, single, batches)
    with recording.batch():
        for event in _three(1):
            recording.record(event)
        assert _count(recorder) == 0  # kept until the block ends
        assert single.events == []
        other = threading.Thread(target=recording.record, args=(_action("x", 9),))
        other.start()
        other.join()
        assert _count(recorder) == 1  # another thread's event went straight in
        with recording.batch():  # a block inside another joins it
            recording.record(_action("y", 10))
        assert _count(recorder) == 1
    assert _count(recorder) == 5
    assert batches.batches == [["action"], ["action", "placement", "error", "action"]]
    assert [e.kind for e in single.events] == ["action", "action", "placement", "error", "action"]
    with pytest.raises(ValueError, match="boom"), recording.batch():
        recording.record(_three(2)[0])
        raise ValueError("boom")
    assert _count(recorder) == 6  # what was recorded before the exception is kept
    assert verify(recorder.chain().store).ok
    recorder.close()


@pytest.mark.parametrize("fail_closed", [True, False])
def test_a_batch_that_cannot_be_stored_fails_closed_or_warns(
    tmp_path: Path, fail_closed: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    recorder = _recorder(tmp_path, fail_closed=fail_closed)
    recording = _recording(recorder)
    recording.record(_action("first", 1))
    with sqlite3.connect(str(tmp_path / "state" / "store.db")) as db:
        db.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'x'); END"
        )
    if fail_closed:
        with pytest.raises(RecorderFailed, match="not run"), recording.batch():
            recording.record(_action("second", 2))
    else:
        with recording.batch():
            recording.record(_action("second", 2))
            recording.record(_action("third", 3))
        assert "2 events (action) not recorded" in capfd.readouterr().err
    assert _count(recorder) == 1
    recorder.close()


def test_a_failed_flush_fails_the_whole_batch(tmp_path: Path) -> None:
    """A driver's batch goes on past one step's failed flush, and still fails at its end, so
    that nothing it admitted is shipped (what the flush held is not in the store)."""
    recorder = _recorder(tmp_path)
    recording = _recording(recorder)
    recorder.chain()  # the store is made
    with sqlite3.connect(str(tmp_path / "state" / "store.db")) as db:
        db.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON events WHEN NEW.action_id = 'a1' "
            "BEGIN SELECT RAISE(ABORT, 'x'); END"
        )
    with pytest.raises(RecorderFailed), recording.batch():
        recording.record(_action("a1", 1))
        with pytest.raises(RecorderFailed):
            recording.flush()
        recording.record(_action("a2", 2))  # the rest is still handed on, then it fails
    assert _count(recorder) == 1
    with recording.batch():
        recording.flush()  # nothing kept: nothing to do
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


# --- the host's batches --------------------------------------------------------------------


class AskEveryone:
    """A policy that asks about every command, and a person who answers ``answer``, having
    looked at what the store holds when asked."""

    def __init__(self, store: Path, answer: str | None) -> None:
        self.store, self.answer = store, answer
        self.seen: list[list[str]] = []

    @hookimpl
    def stockade_decide(self) -> Decision:
        return Decision("ask", "the test asks", by="test")

    @hookimpl
    def stockade_ask(self, pending: PendingApproval) -> Decision | None:
        self.seen.append(_stored(self.store))
        return None if self.answer is None else Decision(self.answer, "a person", by="person")


def _stored(store: Path) -> list[str]:
    with sqlite3.connect(store) as db:
        return [kind for (kind,) in db.execute("SELECT kind FROM events ORDER BY seq")]


def _config(tmp_path: Path) -> Config:
    return Config(store=StoreConfig(path=str(tmp_path / "state" / "store.db")))


def test_a_command_is_recorded_in_two_transactions(make_host, tmp_path: Path) -> None:
    """Its action and decision together, stored before it starts; its result after."""
    batches = Batches()
    host = make_host(plugins=[batches], allow_all=True, config=_config(tmp_path))
    assert host.run(ExecRequest(["true"], str(tmp_path), mode="danger-full-access")).ok
    assert batches.batches == [["action", "permission"], ["result"]]
    with pytest.raises(PolicyDenied):
        host.run(ExecRequest(["true"], str(tmp_path), mode="danger-full-access", gate=NO))
    assert batches.batches[2:] == [["action", "permission"]]  # a refusal: one transaction
    assert _stored(tmp_path / "state" / "store.db") == [
        "action", "permission", "result", "action", "permission",
    ]  # fmt: skip
    assert verify(host.store).ok


@pytest.mark.parametrize("answer", ["allow", None])
def test_the_action_is_stored_before_a_person_is_asked_or_the_step_held(
    make_host, tmp_path: Path, answer: str | None
) -> None:
    batches, asker = Batches(), AskEveryone(tmp_path / "state" / "store.db", answer)
    host = make_host(plugins=[batches, asker], config=_config(tmp_path))
    request = ExecRequest(["true"], str(tmp_path), mode="danger-full-access")
    if answer == "allow":
        assert host.run(request).ok
        assert batches.batches == [["action"], ["permission"], ["result"]]
    else:
        with pytest.raises(PolicyHeld):
            host.run(request)
        assert batches.batches == [["action"], ["permission"]]  # the permission before hold
        assert host.store.get(host.run_id, 1).state == "held"
    assert asker.seen == [["action"]]  # what the person was asked about is in the record
