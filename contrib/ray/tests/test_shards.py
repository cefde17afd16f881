"""A pool made with ``shards=N`` records its runs' events in shard chains written by the
driver's writer processes (``stockade.record.writers``, tested on their own in
``tests/test_record_writers.py``), anchored in the main chain: one ``stockade verify`` covers
them, and an event rewritten in a shard fails it, naming the shard. A writer lost mid-pool
fails the steps whose events it held, closed (their results say so), and the pool goes on."""

from __future__ import annotations

import hashlib
import sqlite3
import sys
from pathlib import Path

import pytest
from ground import Box

from stockade.record.chain import rows
from stockade.record.shards import shard_path, verify_shards
from stockade.record.store import Store

pytest.importorskip("ray")  # optional (see conftest.py)

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))

from helpers.store import verify_cli


def test_a_sharded_pool_records_its_runs_in_shards_that_verify_covers(box: Box) -> None:
    from stockade.config.schema import Config, StoreConfig
    from stockade.request.spec import ExecRequest, Profile
    from stockade.testing import AllowAll
    from stockade_ray import StockadePool

    path = box.state / "store.db"
    pool = StockadePool(1, Config(store=StoreConfig(path=str(path))), plugins=[AllowAll()],
                        shards=2)  # fmt: skip
    try:
        # Runs go to shards by a hash of their id: with 11 runs, both shards hold some but
        # for one pool in a thousand (with 5, one in sixteen put every run in one shard).
        episodes = [pool.episode(profile=Profile(name="t", ask=())) for _ in range(10)]
        for episode in episodes:
            episode.run(ExecRequest(("echo", "hi"))).result(60)
            episode.annotate("reward", score=1.0)
        pool.run(ExecRequest(("true",), str(box.ws))).result(60)
        own = pool.host.run_id
        runs = {e.run_id for e in episodes} | {own}
    finally:
        pool.shutdown()
    store = Store(str(path))
    main = {(r.run_id, r.kind) for r in rows(store)}
    assert not {k for run, k in main if run in runs} - {"taint"}  # all in the shards
    checked = verify_shards(store)  # (each shard's problems and its events after the anchor)
    assert {c.name for c in checked if c.ok and c.after == 0} == {"s0", "s1"}, checked
    held = set()
    for name in ("s0", "s1"):
        shard = Store(shard_path(store, name))
        held |= {(r.run_id, r.kind) for r in rows(shard)}
        shard.close()
    assert {run for run, kind in held if kind == "result"} == runs
    assert {run for run, kind in held if kind == "annotation"} == {e.run_id for e in episodes}
    store.close()
    assert verify_cli(path).returncode == 0  # one verify over the main chain and both shards
    name = f"s{int(hashlib.sha256(own.encode()).hexdigest()[:8], 16) % 2}"  # the pool's run's
    shard = shard_path(Store(str(path)), name)
    with sqlite3.connect(shard) as db:  # a step's event rewritten in a shard: verify fails
        db.execute("UPDATE events SET body = replace(body, '\"step\":1', '\"step\":7')")
    ran = verify_cli(path)
    assert ran.returncode == 1 and f"shard {name}" in ran.stderr, ran.stdout + ran.stderr


def test_a_writer_killed_mid_pool_fails_the_step_it_held_and_the_pool_goes_on(box: Box) -> None:
    import os
    import signal
    import threading

    from stockade.config.schema import Config, StoreConfig
    from stockade.errors import RecorderFailed
    from stockade.request.spec import ExecRequest, Profile
    from stockade.testing import AllowAll
    from stockade_ray import StockadePool
    from stockade_ray.sharding import NAME

    path = box.state / "store.db"
    pool = StockadePool(1, Config(store=StoreConfig(path=str(path))), plugins=[AllowAll()],
                        shards=1)  # fmt: skip
    try:
        episode = pool.episode(profile=Profile(name="t", ask=()))
        assert episode.run(ExecRequest(("echo", "one"))).result(60).result is not None  # control
        record = pool.host.pm.get_plugin(NAME).record
        (pid,) = record.pids()
        os.kill(pid, signal.SIGSTOP)  # the step's first batch waits on it, unanswered
        killer = threading.Timer(1.5, os.kill, (pid, signal.SIGKILL))
        killer.start()  # (admitting the step waits for its first batch to be stored)
        with pytest.raises(RecorderFailed, match=r"shard s0 .*ended.*may be stored or not"):
            episode.run(ExecRequest(("echo", "lost"))).result(60)
        killer.join()
        done = episode.run(ExecRequest(("echo", "two"))).result(60)  # a new writer took it
        assert done.result is not None and done.result.stdout.text == "two\n"
        assert record.pids() != [pid]
    finally:
        pool.shutdown()
    store = Store(str(path))
    (check,) = verify_shards(store)
    assert check.ok and check.after == 0, check
    shard = Store(shard_path(store, "s0"))
    said = [r.body["result"]["argv"] for r in rows(shard) if r.kind == "result"]
    shard.close()
    store.close()
    assert said == [["echo", "one"], ["echo", "two"]]  # the lost step never ran
    assert verify_cli(path).returncode == 0


def test_a_main_chain_failure_does_not_stop_the_shards_being_anchored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed append closes the recorder's main chain and opens another: the shards'
    anchors go to the new one (they went to the closed one, every later anchor failed, and
    closing the pool raised)."""
    from stockade.config.load import parse_config
    from stockade.record import chain as chains
    from stockade.record.events import AnnotationEvent
    from stockade.record.store import StoreError
    from stockade_ray import sharding

    monkeypatch.setattr(sharding, "ANCHOR_SECONDS", 0.0)
    path = tmp_path / "state" / "store.db"
    config = parse_config(f'[store]\npath = "{path}"\nfail_closed = true\n')
    recorder = sharding.ShardingRecorder(config, {}, 2)

    def event(run: str, i: int) -> AnnotationEvent:
        return AnnotationEvent(f"{run}-{i}", run_id=run, step=i, name="r", score=i)

    recorder.stockade_record_batch([event("a", 1), event("", 0)])
    real, failing = chains.Chain.append_many, [True]

    def once(self, events, **how):  # type: ignore[no-untyped-def]
        if self.store.path == str(path) and failing:
            failing.clear()
            raise StoreError("the disk was full for a moment")
        return real(self, events, **how)

    monkeypatch.setattr(chains.Chain, "append_many", once)
    with pytest.raises(StoreError):
        recorder.stockade_record_batch([event("a", 2), event("", 1)])
    for i in range(3, 6):
        recorder.stockade_record_batch([event("a", i)])
    recorder.close()
    store = Store(str(path))
    checks = verify_shards(store)
    anchors = [r for r in rows(store) if r.kind == "anchor"]
    store.close()
    assert all(c.ok and c.after == 0 for c in checks), checks  # every shard event anchored
    assert len(anchors) > 2
