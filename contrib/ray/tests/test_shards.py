"""The sharded record: shard chains written by their own actors, anchored in the main chain,
and one ``stockade verify`` over all of them; each shard tampered with in turn (an event
rewritten, the tail past its anchor cut, the shard re-signed with another key) fails it,
naming that shard, where the untouched copy passes (the control). A pool made with
``shards=N`` records its runs' events there, and the same verify covers them."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from ground import Box

from stockade.record.chain import Chain, rows
from stockade.record.events import AnnotationEvent
from stockade.record.shards import shard_path, verify_shards
from stockade.record.store import Store
from stockade.record.verify import verify

pytest.importorskip("ray")  # optional (see conftest.py)

from stockade_ray.shards import ShardedRecord, ShardWriter

STOCKADE = [sys.executable, "-c", "from stockade.cli import entry; entry()"]


def _verify_cli(store: Path) -> subprocess.CompletedProcess[str]:
    config = store.parent / "config.toml"
    config.write_text(f'[store]\npath = "{store}"\n')
    env = {"STOCKADE_CONFIG": str(config), "STOCKADE_NO_SERVER": "1", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [*STOCKADE, "verify"], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def _events(run: str, count: int) -> list[AnnotationEvent]:
    return [
        AnnotationEvent(f"{run}-{i}", run_id=run, step=i, name="r", score=i) for i in range(count)
    ]


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sharded")
    main = Chain(Store(str(root / "state" / "store.db")))
    sharded = ShardedRecord(main, 2)
    runs = [f"episode{i}" for i in range(6)]
    for run in runs:
        sharded.append(_events(run, 5), run)
    assert {sharded.shard_of(r) for r in runs} == {0, 1}  # both shards hold runs
    sharded.anchor()
    sharded.close()
    main.close()
    return root / "state" / "store.db"


def test_one_verify_over_every_shard(record: Path) -> None:
    store = Store(str(record))
    checks = verify_shards(store)
    assert [c.name for c in checks] == ["s0", "s1"]
    assert all(c.ok and c.anchored > 0 and c.after == 0 for c in checks)
    assert sum(c.verdict.events for c in checks if c.verdict) == 30
    assert verify(store).ok
    store.close()
    ran = _verify_cli(record)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "shard s0: anchored at event" in ran.stdout and "shard s1" in ran.stdout


@pytest.mark.parametrize("shard", ["s0", "s1"])
@pytest.mark.parametrize("how", ["rewritten", "cut", "re-signed"])
def test_a_shard_tampered_with_fails_verify(
    record: Path, tmp_path: Path, shard: str, how: str
) -> None:
    copy = tmp_path / "state"
    shutil.copytree(record.parent, copy)
    store = copy / "store.db"
    assert _verify_cli(store).returncode == 0  # the control: the untouched copy passes
    path = shard_path(Store(str(store)), shard)
    if how == "rewritten":
        with sqlite3.connect(path) as db:
            db.execute("UPDATE events SET body = replace(body, '\"score\":1', '\"score\":9')")
    elif how == "cut":
        with sqlite3.connect(path) as db:
            db.execute("DELETE FROM events WHERE seq = (SELECT MAX(seq) FROM events)")
        Path(path + ".head").unlink(missing_ok=True)  # a careful cut removes the head too
    else:  # a whole new history under a key of its own
        shutil.rmtree(Path(path).parent)
        chain = Chain(Store(path))
        chain.append_many(_events("forged", 15))
        chain.close()
    ran = _verify_cli(store)
    assert ran.returncode == 1, ran.stdout
    assert f"shard {shard}" in ran.stderr


def test_the_writers_run_on_the_drivers_node(tmp_path: Path) -> None:
    """A shard's store is written beside the driver's: its writer runs on the driver's node
    (hard affinity), never where Ray's default placement would spread it."""
    import ray

    from stockade.errors import UsageError

    here = ray.get_runtime_context().get_node_id()
    # The control: the cluster has another node, and a writer placed by hand can reach it.
    probe = ray.remote(ShardWriter).options(num_cpus=0, resources={"side": 1})
    probe = probe.remote(str(tmp_path / "probe" / "store.db"))
    assert ray.get(probe.node.remote(), timeout=60) != here
    ray.kill(probe)
    main = Chain(Store(str(tmp_path / "state" / "store.db")))
    sharded = ShardedRecord(main, 4)
    try:
        assert ray.get([w.node.remote() for w in sharded.writers], timeout=60) == [here] * 4
    finally:
        sharded.close()
        main.close()
    for placement, named in (
        ({"num_cpus": 0, "resources": {"side": 1}}, "has not side"),
        ({"num_cpus": 64}, "has not CPU"),
        ({"num_cpus": 0, "num_gpus": 1}, "has not GPU"),
        ({"scheduling_strategy": "SPREAD"}, "cannot choose its node"),
    ):
        with pytest.raises(UsageError, match=named):
            ShardedRecord(Chain(Store(str(tmp_path / "other" / "store.db"))), 1, placement)


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
    assert _verify_cli(path).returncode == 0  # one verify over the main chain and both shards
    name = f"s{int(hashlib.sha256(own.encode()).hexdigest()[:8], 16) % 2}"  # the pool's run's
    shard = shard_path(Store(str(path)), name)
    with sqlite3.connect(shard) as db:  # a step's event rewritten in a shard: verify fails
        db.execute("UPDATE events SET body = replace(body, '\"step\":1', '\"step\":7')")
    ran = _verify_cli(path)
    assert ran.returncode == 1 and f"shard {name}" in ran.stderr, ran.stdout + ran.stderr


CUT_OFF = """
import sys
from stockade.record.chain import Chain
from stockade.record.events import ActionEvent, PermissionEvent
from stockade.record.store import Store
from stockade.request.verdict import Classification, Decision
chain = Chain(Store(sys.argv[1]))
chain.append_many([
    ActionEvent("cut", ("sleep", "9"), cwd="/", mode="read-only", origin="api",
                profile="default", run_id="episode-cut", step=1),
    PermissionEvent("cut", Classification("reads", ("test",)),
                    decision=Decision("allow", "test", by="test")),
])
"""  # a shard writer's process that recorded an allowed command, then went away


def test_a_shards_commands_cut_off_are_closed_on_the_next_start(tmp_path: Path) -> None:
    path = tmp_path / "state" / "store.db"
    main = Chain(Store(str(path)))
    shard = shard_path(main.store, "s0")
    subprocess.run([sys.executable, "-c", CUT_OFF, shard], check=True, timeout=60)
    before = Store(shard)
    assert [r.kind for r in rows(before)] == ["action", "permission"]  # the control
    before.close()
    sharded = ShardedRecord(main, 1)  # the next start
    sharded.close()
    main.close()
    after = Store(shard)
    closing = [r for r in rows(after) if r.kind == "error"]
    assert [(r.action_id, r.body["code"]) for r in closing] == [("cut", "aborted")]
    assert "ended before its result was recorded" in closing[0].body["message"]
    after.close()
    (check,) = verify_shards(Store(str(path)))
    assert check.ok and check.after == 0, check  # the closing is anchored at once


def test_a_shard_is_named_from_its_opening_so_deleting_it_before_any_event_fails(
    tmp_path: Path,
) -> None:
    """Each shard is anchored at event 0 as the record opens: a pool killed before a shard's
    first anchor of events used to leave a folder whose deletion left no trace."""
    store = tmp_path / "state" / "store.db"
    main = Chain(Store(str(store)))
    sharded = ShardedRecord(main, 2)
    sharded.close()
    main.close()
    opened = Store(str(store))
    anchored = [(r.body["shard"], r.body["seq"]) for r in rows(opened) if r.kind == "anchor"]
    assert anchored == [("s0", 0), ("s1", 0)]
    assert all(check.ok for check in verify_shards(opened)), verify_shards(opened)  # control
    shutil.rmtree(Path(shard_path(opened, "s1")).parent)
    (check,) = [c for c in verify_shards(opened) if c.name == "s1"]
    opened.close()
    assert not check.ok and "is missing" in check.problems[0], check
