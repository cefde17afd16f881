"""The pool on a local cluster: 200 steps make one chain that verifies and names the node
and actor of each; sticky workspaces carry files across steps, in and out; a killed worker
gives its step a recorded ``WorkerLost`` and is replaced; a cancelled step, and a pool shut
down under a running one, kill the command and everything it started."""

from __future__ import annotations

import os
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from ground import PYTHON, Box, running

from stockade.cli.record import steps
from stockade.config.schema import Config, StoreConfig
from stockade.conformance.procs import wait_until
from stockade.errors import PolicyDenied, PolicyHeld, UsageError
from stockade.record.chain import rows
from stockade.record.store import Store
from stockade.record.verify import verify
from stockade.request.spec import ExecRequest, Profile
from stockade.testing import AllowAll

pytest.importorskip("ray")  # optional (see conftest.py): stockade_ray is imported after it

from stockade_ray import INPUT_BYTES, Caps, StepCancelled, StockadePool, WorkerLost

# Starts a grandchild that would outlive a careless kill (both carry the token in their
# command lines), says so in a file, then waits.
SPAWN = """
import subprocess, sys, time
child = subprocess.Popen(["sleep", "300", sys.argv[2]])
open(sys.argv[1], "w").close()
time.sleep(300)
"""

UPPER = """
import pathlib
src = pathlib.Path("in.txt").read_text()
pathlib.Path("out.txt").write_text(src.upper())
pathlib.Path("big.txt").write_text("x" * 5000)
"""


@pytest.fixture(scope="module")
def state() -> Iterator[Path]:
    base = Path.home() / ".stockade-tests"
    base.mkdir(mode=0o700, exist_ok=True)
    root = Path(os.path.realpath(base)) / f"ray-pool-{os.getpid()}"
    root.mkdir()
    yield root
    import shutil

    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def pool(state: Path) -> Iterator[StockadePool]:
    agents = {name: Profile(name=name, ask=()) for name in ("r1", "r2")}
    config = Config(agents=agents, store=StoreConfig(path=str(state / "store.db")))
    made = StockadePool(2, config, plugins=[AllowAll()], caps=Caps(file_bytes=1000))
    yield made
    made.shutdown()


def _store(pool: StockadePool) -> Store:
    assert pool.host.config.store.path is not None
    return Store(pool.host.config.store.path)


def _spawn(box: Box) -> tuple[ExecRequest, Path, str]:
    """A request that starts a command and its grandchild; its marker file and token."""
    marker, token = box.ws / "started", f"0.{secrets.randbelow(10**9):09d}1"
    return ExecRequest((PYTHON, "-S", "-c", SPAWN, str(marker), token), str(box.ws)), marker, token


def _started(marker: Path, token: str) -> list[int]:
    """The host pids of the command and its grandchild, once both run."""
    del marker  # a layered run's files are not seen while it runs: its processes are
    assert wait_until(lambda: len(running(token)) >= 2, 60), running(token)
    return running(token)


def test_200_steps_make_one_chain_that_verifies(pool: StockadePool, box: Box) -> None:
    requests = [ExecRequest(("echo", f"step {i}"), str(box.ws)) for i in range(200)]
    done = {f.index: f.result(120) for f in pool.map(requests)}
    assert sorted(done) == list(range(200))
    wrong = {
        i: (d.result.exit_code, d.result.signal, d.result.stdout.text, d.result.stderr.text[-400:])
        for i, d in done.items()
        if d.result.stdout.text != f"step {i}\n"
    }
    assert not wrong, wrong
    assert {d.actor for d in done.values()} == {w["actor"] for w in pool.workers()}
    store = _store(pool)
    verdict = verify(store)
    assert verdict.ok, verdict.problems
    mine = {d.result.action_id for d in done.values()}
    found = [s for s in steps(rows(store, pool.host.run_id)) if s.get("argv", [""])[0] == "echo"]
    found = [s for s in found if s["argv"][1].startswith("step ")]
    assert len(found) == 200
    assert all(s["state"] == "ran" and s["exit_code"] == 0 for s in found)
    by_action = {r.action_id: r.body for r in rows(store) if r.kind == "placement"}
    assert mine <= set(by_action)
    for d in done.values():
        placed = by_action[d.result.action_id]
        assert (placed["node"], placed["actor"]) == (d.node, d.actor)
    store.close()


def test_a_workspace_sticks_to_one_worker_and_files_travel(pool: StockadePool) -> None:
    first = pool.run(
        ExecRequest((PYTHON, "-S", "-c", UPPER), profile="r1"), files={"in.txt": b"hello\n"}
    ).result(120)
    assert first.result.exit_code == 0, first.result.stderr.text
    back = {f["path"]: f for f in first.files}
    assert back["out.txt"]["text"] == "HELLO\n"
    assert back["big.txt"]["truncated"] and back["big.txt"]["returned"] == 1000  # capped
    assert "in.txt" not in back  # written before the step, not by it
    # The next steps of r1 go to the same worker and see its files; r2 goes to the other.
    later = [pool.run(ExecRequest(("cat", "out.txt"), profile="r1")) for _ in range(3)]
    other = pool.run(ExecRequest(("ls",), profile="r2")).result(120)
    for future in later:
        step = future.result(120)
        assert step.result.stdout.text == "HELLO\n" and step.actor == first.actor
    assert other.actor != first.actor
    # An input file the file tool refuses, and inputs that are not small: nothing runs.
    refused = pool.run(ExecRequest(("true",), profile="r1"), files={"../escape": b"x"})
    with pytest.raises(UsageError, match="escape"):
        refused.result(120)
    with pytest.raises(UsageError, match="at most"):
        pool.run(ExecRequest(("true",), profile="r1"), files={"a": b"x" * (INPUT_BYTES + 1)})


def test_a_held_step_approved_later_runs_on_the_pool(state: Path, box: Box) -> None:
    config = Config(store=StoreConfig(path=str(state / "store.db")))
    held_pool = StockadePool(1, config)  # the default policy: a shell asks
    try:
        future = held_pool.run(ExecRequest(("sh", "-c", "echo approved-$((6*7))"), str(box.ws)))
        declined = held_pool.run(ExecRequest(("sh", "-c", "rm -f none"), str(box.ws)))
        assert future.held is not None and declined.held is not None
        run_id, step = future.held["run_id"], future.held["step"]
        assert held_pool.host.store.get(run_id, step).state == "held"
        with pytest.raises(TimeoutError):
            future.result(1)  # it waits for a person
        # Nothing was shipped: each step's record stops at its permission.
        store = _store(held_pool)
        kinds = [r.kind for r in rows(store, held_pool.host.run_id)]
        assert kinds == ["action", "permission"] * 2
        held_pool.approve(run_id, step, by="a tester")
        done = future.result(60)
        assert done.result.stdout.text == "approved-42\n"
        assert done.actor == held_pool.workers()[0]["actor"]  # it ran on the pool
        assert held_pool.host.store.get(run_id, step).state == "done"
        held_pool.decline(declined.held["run_id"], declined.held["step"], by="a tester")
        with pytest.raises(PolicyDenied):
            declined.result(60)
        kinds = [r.kind for r in rows(store, held_pool.host.run_id)]
        assert kinds.count("placement") == 1 and "decline" in kinds and "result" in kinds
        assert verify(store).ok
        store.close()
    finally:
        held_pool.shutdown()


def test_shutdown_releases_a_step_still_held(state: Path, box: Box) -> None:
    config = Config(store=StoreConfig(path=str(state / "store.db")))
    held_pool = StockadePool(1, config)
    future = held_pool.run(ExecRequest(("sh", "-c", "rm -f none"), str(box.ws)))
    assert future.held is not None
    held_pool.shutdown()
    with pytest.raises(PolicyHeld, match="shut down"):
        future.result(10)


def test_a_killed_worker_is_a_recorded_loss_and_is_replaced(pool: StockadePool, box: Box) -> None:
    request, marker, token = _spawn(box)
    future = pool.run(request)
    _started(marker, token)  # the control: the test sees them run
    before = {w["actor"] for w in pool.workers()}
    os.kill(int(future.worker["pid"]), signal.SIGKILL)
    with pytest.raises(WorkerLost) as lost:
        future.result(120)
    assert lost.value.details["actor"] == future.worker["actor"]
    assert wait_until(lambda: not running(token)), "the command outlived it"
    store = _store(pool)
    [step] = [s for s in steps(rows(store)) if s.get("argv", [""])[-1] == token]
    assert (step["state"], step["error"]) == ("error", "worker_lost")
    assert step["actor"] == future.worker["actor"]
    assert verify(store).ok
    store.close()
    assert wait_until(lambda: len(pool.workers()) == 2, 120), "no replacement"
    after = {w["actor"] for w in pool.workers()}
    assert future.worker["actor"] not in after and after != before
    assert lost.value.details["started"] is True
    # The pool goes on, on the new worker too.
    done = [f.result(120) for f in pool.map(ExecRequest(("true",), str(box.ws)) for _ in range(6))]
    assert {d.actor for d in done} == after


def test_a_cancelled_step_kills_its_whole_group(pool: StockadePool, box: Box) -> None:
    import ray

    request, marker, token = _spawn(box)
    future = pool.run(request)
    _started(marker, token)
    ray.cancel(future.ref)
    with pytest.raises(StepCancelled):
        future.result(120)
    assert wait_until(lambda: not running(token)), "the command outlived it"
    store = _store(pool)
    [step] = [s for s in steps(rows(store)) if s.get("argv", [""])[-1] == token]
    assert (step["state"], step["error"]) == ("error", "cancelled")
    store.close()
    # The worker is still there and takes the next step.
    assert pool.run(ExecRequest(("true",), str(box.ws))).result(120).actor in {
        w["actor"] for w in pool.workers()
    }


def test_shutdown_kills_what_is_running_and_closes_its_record(state: Path, box: Box) -> None:
    config = Config(store=StoreConfig(path=str(state / "store.db")))
    own = StockadePool(1, config, plugins=[AllowAll()])
    request, marker, token = _spawn(box)
    future = own.run(request)
    _started(marker, token)
    own.shutdown()
    with pytest.raises((StepCancelled, WorkerLost)):
        future.result(120)
    assert wait_until(lambda: not running(token)), "the command outlived it"
    store = _store(own)
    [step] = [s for s in steps(rows(store)) if s.get("argv", [""])[-1] == token]
    assert step["state"] == "error" and step["error"] in ("cancelled", "worker_lost")
    store.close()
    with pytest.raises(UsageError, match="shut down"):
        own.run(ExecRequest(("true",), str(box.ws)))
