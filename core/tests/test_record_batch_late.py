"""Recorders registered or swapped after the first event (as the pool's sharding recorder is):
one swapped in gets each event once, and a batch-only recorder registered later gets what
follows."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pluggy

from stockade import NAME, hookimpl
from stockade.config.schema import Config, StoreConfig
from stockade.plugin import hookspecs
from stockade.plugin.manager import Hooks
from stockade.record.events import ActionEvent, Event
from stockade.record.recorder import Recorder
from stockade.record.recording import Recording


def _action(action_id: str, step: int) -> ActionEvent:
    return ActionEvent(
        action_id, ("true",), cwd="/", mode="read-only", origin="api", profile="default",
        run_id="run-b", step=step,
    )  # fmt: skip


def _count(recorder: Recorder) -> int:
    store = recorder.chain().store
    with store.locked():
        return int(store.connection.execute("SELECT count(*) FROM events").fetchone()[0])


def _rec(path: Path) -> Recorder:
    return Recorder(Config(store=StoreConfig(path=str(path))), {})


def test_swapped_recorder_records_every_event_twice(tmp_path: Path) -> None:
    pm = pluggy.PluginManager(NAME)
    pm.add_hookspecs(hookspecs)
    first = _rec(tmp_path / "a" / "store.db")
    pm.register(first, name="recorder")
    recording = Recording(Hooks(pm))
    recording.record(_action("a1", 1))  # first use: the subset caller excludes `first`
    pm.unregister(first)
    first.close()
    second = _rec(tmp_path / "b" / "store.db")  # what ShardingRecorder.install does
    pm.register(second, name="recorder")
    recording.record(_action("a2", 2))
    assert _count(second) == 1, f"stored {_count(second)} times"


class BatchOnly:
    def __init__(self) -> None:
        self.got: list[str] = []

    @hookimpl
    def stockade_record_batch(self, events: Sequence[Event]) -> None:
        self.got += [e.action_id for e in events]


class OneByOne:
    @hookimpl
    def stockade_record(self, event: Event) -> None:
        pass


def test_batch_only_recorder_registered_later_gets_nothing(tmp_path: Path) -> None:
    pm = pluggy.PluginManager(NAME)
    pm.add_hookspecs(hookspecs)
    pm.register(OneByOne())
    hooks = Hooks(pm)
    hooks.record(_action("a1", 1))
    late = BatchOnly()
    pm.register(late)
    hooks.record(_action("a2", 2))
    assert late.got == ["a2"]
