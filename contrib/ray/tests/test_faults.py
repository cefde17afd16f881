"""Faults on a real cluster: a node lost mid-run (its raylet killed by pid) and a worker
killed by pid. Every affected caller gets ``WorkerLost`` saying whether its step had
started; steps elsewhere finish and are recorded; the record has no step left placed without
an outcome and verifies; replacements never land on the dead node and keep to the placement
asked; an episode whose worker is replaced goes on there, in its workspace where the folder
survives, else forked again from its snapshot or empty, and says which in the record;
``shutdown`` releases every waiter, even of a pool whose only node is gone."""

from __future__ import annotations

import os
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import wait
from pathlib import Path

import pytest
from ground import PYTHON, Box, running, unmount_forks
from nodes import Cluster

from stockade.cli.record import steps
from stockade.config.schema import Config, PluginsConfig, StoreConfig
from stockade.conformance.procs import wait_until
from stockade.record.chain import rows
from stockade.record.store import Store
from stockade.record.verify import verify
from stockade.request.spec import ExecRequest
from stockade.testing import AllowAll

pytest.importorskip("ray")  # optional (see conftest.py)

from stockade_ray import Done, StockadePool, WorkerLost

# Says it started (a file named by its token), then waits: long enough to be cut off.
WAIT = (
    "import pathlib, sys, time; pathlib.Path(sys.argv[1]).touch(); time.sleep(float(sys.argv[2]))"
)


@pytest.fixture
def state() -> Iterator[Path]:
    import shutil

    base = Path.home() / ".stockade-tests"
    base.mkdir(mode=0o700, exist_ok=True)
    root = Path(os.path.realpath(base)) / f"ray-faults-{os.getpid()}-{secrets.token_hex(3)}"
    root.mkdir()
    yield root
    unmount_forks(root)
    shutil.rmtree(root, ignore_errors=True)


def _config(state: Path) -> Config:
    """Direct writes (``layers = false``): the test sees a step's start marker while it runs;
    a layered run's files appear only when it lands."""
    direct = PluginsConfig(settings={"bubblewrap": {"layers": False}})
    return Config(store=StoreConfig(path=str(state / "store.db")), plugins=direct)


def _step(box: Box, seconds: float) -> tuple[ExecRequest, Path]:
    token = f"{secrets.randbelow(10**9):09d}"
    marker = box.ws / f"started-{token}"
    argv = (PYTHON, "-S", "-c", WAIT, str(marker), str(seconds))
    return ExecRequest(argv, str(box.ws)), marker


def _record(pool: StockadePool) -> tuple[Store, list[dict[str, object]]]:
    assert pool.host.config.store.path is not None
    store = Store(pool.host.config.store.path)
    return store, steps(rows(store, pool.host.run_id))


def test_a_lost_node(cluster: Cluster, state: Path, box: Box) -> None:
    doomed = cluster.add_side("doomed")
    doomed_id = doomed.node_id()
    head_ids = {n for n in _alive() if n != doomed_id}
    spread = StockadePool(4, _config(state), plugins=[AllowAll()])
    pinned = StockadePool(1, _config(state), {"num_cpus": 0, "resources": {"doomed": 1}},
                          plugins=[AllowAll()])  # fmt: skip
    try:
        # The default placement spreads: every live node holds a worker.
        assert {w["node"] for w in spread.workers()} == {doomed_id, *head_ids}
        there = {w["actor"] for w in spread.workers() if w["node"] == doomed_id}
        episodes = [spread.episode() for _ in range(4)]  # one on each worker
        episode = next(e for e in episodes if e.where["node"] == doomed_id)
        # Two steps a worker: one running, one queued behind it; and the pinned pool's.
        work = [_step(box, 4) for _ in range(8)]
        futures = [spread.run(request) for request, _ in work]
        request, marker = _step(box, 60)
        cut = pinned.run(request)
        ep_future = episode.run(ExecRequest(("sleep", "60")))
        assert wait_until(marker.exists, 60), "the pinned pool's step never started"
        assert wait_until(lambda: sum(m.exists() for _, m in work) >= 4, 60)
        doomed.kill_raylet()

        # The pinned pool: its running step is lost, having started.
        with pytest.raises(WorkerLost) as lost:
            cut.result(120)
        assert lost.value.details["started"] is True
        assert lost.value.details["node"] == doomed_id
        # The spread pool: the doomed node's steps are lost (the running one started, the
        # queued one did not); every other step finished.
        wait(futures, timeout=180)
        outcomes = [f.exception() or f.result() for f in futures]
        gone = [o for o in outcomes if isinstance(o, WorkerLost)]
        done = [o for o in outcomes if isinstance(o, Done)]
        assert len(gone) + len(done) == 8, outcomes
        k = len(there)  # each doomed worker: one step running (started), one queued (not)
        assert {g.details["actor"] for g in gone} == there
        assert sorted(g.details["started"] for g in gone) == [False] * k + [True] * k
        assert all(d.result.exit_code == 0 and d.node != doomed_id for d in done)
        assert len(done) == 8 - 2 * k
        # The episode lived on that node: its step is lost; its next one is refused while
        # the replacement starts, or goes on there (never on the dead node).
        with pytest.raises(WorkerLost):
            ep_future.result(120)
        try:
            went = episode.run(ExecRequest(("true",))).result(120)
        except WorkerLost as refused:
            assert refused.details["started"] is False and "episode" in refused.message
        else:
            assert went.node != doomed_id and episode.rehomed[-1]["to"]["node"] == went.node

        # No gap: every step placed has an outcome, and the chain verifies.
        store, found = _record(spread)
        _, cut_steps = _record(pinned)
        found += cut_steps + episode.steps()
        assert len(found) == 8 + 1 + 2 and all(s["state"] in ("ran", "error") for s in found), found
        assert verify(store).ok
        store.close()
        # The replacement: on a live node, never the dead one; the pool goes on.
        assert wait_until(lambda: len(spread.workers()) == 4, 120)
        assert doomed_id not in {w["node"] for w in spread.workers()}
        trues = (ExecRequest(("true",), str(box.ws)) for _ in range(8))
        again = [f.result(120) for f in spread.map(trues)]
        assert {d.node for d in again} <= head_ids
        # The pinned pool has nowhere to go: a new step is refused at once, not started.
        with pytest.raises(WorkerLost) as none:
            pinned.run(ExecRequest(("true",), str(box.ws))).result(30)
        assert none.value.details["started"] is False
    finally:
        began = time.monotonic()
        pinned.shutdown()
        spread.shutdown()
        assert time.monotonic() - began < 60, "shutdown waited on the dead node"
        # The pinned pool's replacement could never start: its thread ended with the pool
        # (one left waiting called Ray after the session shut Ray down, and Ray ended pytest).
        left = [t.name for t in threading.enumerate() if t.name == "stockade-ray-replace"]
        assert not left, left
        doomed.stop()


def test_a_killed_worker_is_replaced_where_the_placement_asks(
    cluster: Cluster, state: Path, box: Box
) -> None:
    side = cluster.sides[0]
    side_id = side.node_id()
    pool = StockadePool(2, _config(state), {"num_cpus": 0, "resources": {"side": 1}},
                        plugins=[AllowAll()])  # fmt: skip
    try:
        assert {w["node"] for w in pool.workers()} == {side_id}
        request, marker = _step(box, 60)
        future = pool.run(request)
        queued = [pool.run(_step(box, 1)[0]) for _ in range(3)]
        assert wait_until(marker.exists, 60)
        os.kill(int(future.worker["pid"]), signal.SIGKILL)
        with pytest.raises(WorkerLost) as lost:
            future.result(120)
        assert lost.value.details["started"] is True
        wait(queued, timeout=120)
        for other in queued:  # behind it on the dead worker: lost, never started; else ran
            error = other.exception()
            assert error is None or (isinstance(error, WorkerLost) and not error.details["started"])
        assert wait_until(lambda: len(pool.workers()) == 2, 120)
        assert {w["node"] for w in pool.workers()} == {side_id}  # the placement asked
        assert future.worker["actor"] not in {w["actor"] for w in pool.workers()}
        assert not running(marker.name)
    finally:
        pool.shutdown()


def test_shutdown_ends_a_replacement_that_cannot_start(state: Path) -> None:
    """A lost worker whose replacement waits for a node that never comes: shutdown ends the
    waiting thread, so that nothing of the pool calls Ray after the driver shuts Ray down
    (Ray then ends the whole process with status 1)."""
    pool = StockadePool(1, _config(state), plugins=[AllowAll()])
    try:
        [slot] = pool.places.slots
        # From now on a worker of this pool would need a resource no node has.
        pool.places._options, pool.places._spread = (
            {"num_cpus": 0, "resources": {"nowhere": 1}},
            False,
        )
        pool.places.lose(slot, slot.actor)
        assert wait_until(lambda: _replacing() == 1, 30)
        time.sleep(1)  # the replacement is now waiting for a place
    finally:
        began = time.monotonic()
        pool.shutdown()
        ended = time.monotonic() - began
    assert _replacing() == 0  # (with a 120 s wait for the start, the thread was still there)
    assert ended < 20, f"shutdown took {ended:.1f} s"


def _replacing() -> int:
    return sum(t.name == "stockade-ray-replace" and t.is_alive() for t in threading.enumerate())


def _alive() -> set[str]:
    import ray

    return {str(n["NodeID"]) for n in ray.nodes() if n["Alive"]}


def test_an_episode_goes_on_after_its_worker_is_killed(state: Path, box: Box) -> None:
    (box.ws / "seed.txt").write_text("seed")
    pool = StockadePool(1, _config(state), plugins=[AllowAll()])
    try:
        kept, forked = pool.fork(pool.snapshot(str(box.ws)), 2)
        empty = pool.episode()
        kept.run(ExecRequest(("sh", "-c", "echo mine > mine.txt"))).result(60)
        forked.run(ExecRequest(("sh", "-c", "echo gone > gone.txt"))).result(60)
        marker = Path(kept.workspace) / f"started-{secrets.token_hex(4)}"
        cut = kept.run(ExecRequest((PYTHON, "-S", "-c", WAIT, str(marker), "60")))
        assert wait_until(marker.exists, 60)
        os.kill(int(cut.worker["pid"]), signal.SIGKILL)
        with pytest.raises(WorkerLost) as lost:
            cut.result(120)
        assert lost.value.details["started"] is True
        assert lost.value.details["episode"] == kept.name
        old = cut.worker["actor"]
        assert wait_until(lambda: [w["actor"] for w in pool.workers()] not in ([], [old]), 120)
        # Its folder survives on the node: the episode goes on in it, on the replacement.
        again = kept.run(ExecRequest(("cat", "mine.txt"))).result(60)
        assert again.result.stdout.text == "mine\n" and again.actor != cut.worker["actor"]
        assert kept.rehomed[-1]["workspace"] == "kept"
        # A node without its folder (removed here): forked again from the snapshot, the
        # changes since lost, and said; an episode with no snapshot starts empty, and says so.
        import shutil

        from stockade.layers import snapshots

        if snapshots.is_fork(forked.workspace, store=str(state)):  # a mount too, as root
            snapshots.discard_fork(forked.workspace, store=str(state))
        else:  # a copy (this user may not mount, and its steps are not layered)
            shutil.rmtree(forked.workspace)
        shutil.rmtree(empty.workspace)
        listed = forked.run(ExecRequest(("ls",))).result(60).result
        assert listed.stdout.text.split() == ["seed.txt"], (forked.rehomed, listed)
        assert forked.rehomed[-1]["workspace"] == "re-forked" and forked.rehomed[-1]["steps"] == 1
        assert empty.run(ExecRequest(("ls",))).result(60).result.stdout.text == ""
        assert empty.rehomed[-1]["workspace"] == "empty"
        # In the signed record, beside each episode's commands.
        store = Store(str(state / "store.db"))
        said = {r.run_id: r.body["verdict"] for r in rows(store) if r.kind == "annotation"}
        assert said == {kept.run_id: "kept", forked.run_id: "re-forked", empty.run_id: "empty"}
        assert verify(store).ok
        store.close()
    finally:
        pool.shutdown()


@pytest.mark.parametrize("gone", [False, True])
def test_a_pool_step_whose_sticky_workspace_went_with_its_worker_is_not_run_empty(
    state: Path, box: Box, gone: bool
) -> None:
    """A step of the pool (not of an episode) sticks to its workspace's worker. When that
    worker is lost, the first step after is run only where the folder still holds its files
    (``gone=False``, the control: a node that kept it); where it does not (emptied here, as
    a folder whose files were on the lost node's disk), the step is refused with
    ``WorkerLost`` (nothing ran), recorded, and the next step starts in an empty folder,
    knowingly."""
    import shutil

    pool = StockadePool(1, _config(state), plugins=[AllowAll()])
    ws = box.ws / "sticky"
    ws.mkdir()
    at = {"cwd": str(ws), "workspace": str(ws)}  # a workspace named: its steps stick to it
    try:
        pool.run(ExecRequest(("sh", "-c", "echo mine > mine.txt"), **at)).result(60)
        marker = ws / f"started-{secrets.token_hex(4)}"
        cut = pool.run(ExecRequest((PYTHON, "-S", "-c", WAIT, str(marker), "60"), **at))
        assert wait_until(marker.exists, 60)
        old = cut.worker["actor"]
        os.kill(int(cut.worker["pid"]), signal.SIGKILL)
        with pytest.raises(WorkerLost):
            cut.result(120)
        assert wait_until(lambda: [w["actor"] for w in pool.workers()] not in ([], [old]), 120)
        if gone:  # the driver resolves the folder on its node: there, it is empty
            shutil.rmtree(ws)
            ws.mkdir()
        after = pool.run(ExecRequest(("cat", "mine.txt"), **at))
        if not gone:
            assert after.result(60).result.stdout.text == "mine\n"
            return
        with pytest.raises(WorkerLost) as lost:
            after.result(60)
        assert lost.value.details["started"] is False
        assert lost.value.details["workspace"] == str(ws)
        assert "went with the lost node" in lost.value.message
        listed = pool.run(ExecRequest(("ls", "-A"), **at)).result(60).result
        assert listed.exit_code == 0 and listed.stdout.text == ""  # said once, then empty
        store, found = _record(pool)
        assert [s["state"] for s in found] == ["ran", "error", "error", "ran"]
        assert found[2]["error"] == "worker_lost" and verify(store).ok
        store.close()
    finally:
        pool.shutdown()
