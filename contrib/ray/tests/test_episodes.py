"""Episodes are runs: each has its own step budget, taints, held steps and log; they are made
while the pool runs, with no profile declared first; N of them fork from one snapshot, each
sticky to its worker, and export their workspace or its changes as a tar stream (binary,
capped); input files and rewards are in the signed record; awaited calls keep the event
loop free while steps are admitted."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import secrets
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ground import Box, unmount_forks

from stockade.config.schema import Config, StoreConfig
from stockade.errors import PolicyDenied, UsageError
from stockade.record.chain import rows
from stockade.record.store import Store
from stockade.record.verify import verify
from stockade.request.spec import Budget, ExecRequest, Profile

pytest.importorskip("ray")  # optional (see conftest.py)

from stockade_ray import StockadePool, TooLarge

BINARY = bytes(range(256)) * 64


@pytest.fixture(scope="module")
def pool() -> Iterator[StockadePool]:
    import shutil

    base = Path.home() / ".stockade-tests"
    base.mkdir(mode=0o700, exist_ok=True)
    root = Path(os.path.realpath(base)) / f"ray-episodes-{os.getpid()}-{secrets.token_hex(3)}"
    root.mkdir()
    made = StockadePool(2, Config(store=StoreConfig(path=str(root / "store.db"))))
    yield made
    made.shutdown()
    unmount_forks(root)
    shutil.rmtree(root, ignore_errors=True)


def _store(pool: StockadePool) -> Store:
    assert pool.host.config.store.path is not None
    return Store(pool.host.config.store.path)


QUIET = Profile(name="t", ask=())  # nothing asks but destroys (the default policy)


def test_each_episode_is_a_run_of_its_own(pool: StockadePool) -> None:
    first = pool.episode(profile=QUIET, budget=Budget(steps=3))
    second = pool.episode(profile=QUIET, budget=Budget(steps=3))
    assert first.run_id != second.run_id and first.workspace != second.workspace
    for _ in range(3):  # each has its own three steps: one's do not spend the other's
        assert first.run(ExecRequest(("true",))).result(60).result.exit_code == 0
        assert second.run(ExecRequest(("true",))).result(60).result.exit_code == 0
    for episode in (first, second):
        with pytest.raises(PolicyDenied, match="budget"):
            episode.run(ExecRequest(("true",)))
    # Its own log: `stockade log --run` shows only its steps.
    assert [s["run_id"] for s in first.steps()] == [first.run_id] * 4
    # A workspace of its own, sticky to one worker: a file stays for its next step, and
    # the other episode does not see it.
    third = pool.episode(profile=QUIET)
    third.run(ExecRequest(("cp", "in.txt", "mine.txt")), files={"in.txt": b"x"}).result(60)
    assert third.run(ExecRequest(("cat", "mine.txt"))).result(60).result.stdout.text == "x"
    fourth = pool.episode(profile=QUIET)
    assert fourth.run(ExecRequest(("ls",))).result(60).result.stdout.text == ""
    for episode in (first, second, third, fourth):
        episode.discard()
    with pytest.raises(UsageError, match="closed"):
        first.run(ExecRequest(("true",)))
    assert not os.path.exists(third.workspace)


def test_one_episodes_taint_does_not_hold_anothers_network_step(pool: StockadePool) -> None:
    profile = Profile(name="t", private=("secret.txt",), hosts=("example.invalid",), ask=())
    tainted = pool.episode(profile=profile)
    clean = pool.episode(profile=profile)
    tainted.run(ExecRequest(("true",)), files={"secret.txt": b"s"}).result(60)
    granted = ExecRequest(("cat", "secret.txt"), read_private=True)  # private: a capability
    assert tainted.run(granted).result(60).result.stdout.text == "s"
    words = ExecRequest(("curl", "-s", "--max-time", "1", "https://example.invalid/"))
    tainted.run(words)  # somebody else's words, now beside private data
    net = ExecRequest(("curl", "-s", "--max-time", "1", "https://example.invalid/"))
    held = tainted.run(net)
    assert held.held is not None, "the tainted episode's network step should wait"
    free = clean.run(net)
    assert free.held is None  # the other episode holds neither
    free.exception(60)
    tainted.discard()
    clean.discard()


def test_forks_from_one_snapshot_and_exports(pool: StockadePool, box: Box) -> None:
    (box.ws / "src").mkdir()
    (box.ws / "src" / "app.py").write_text("print('v1')\n")
    (box.ws / "blob.bin").write_bytes(BINARY)
    snap = pool.snapshot(str(box.ws))
    assert snap.files == 2
    forks = pool.fork(snap, 4, profile=QUIET)
    (box.ws / "src" / "app.py").write_text("changed after the snapshot\n")  # forks keep v1
    assert len({e.where["actor"] for e in forks}) == 2  # spread over both workers
    # From the layers' snapshot, no copy: the forks share its files (and stay apart below),
    # each an overlay over it as root, hard links to it otherwise.
    method = "overlay" if os.geteuid() == 0 else "layers"
    assert {e.forked.method for e in forks if e.forked} == {method}, forks[0].forked
    assert len({e.forked.base for e in forks if e.forked}) == 1  # one snapshot on the node
    for i, episode in enumerate(forks):
        seen = episode.run(ExecRequest(("cat", "src/app.py"))).result(60)
        assert seen.result.stdout.text == "print('v1')\n"
        change = ExecRequest(("cp", "in.txt", "src/app.py"))
        done = episode.run(change, files={"in.txt": f"print({i})".encode()}).result(60)
        assert done.actor == episode.where["actor"]  # sticky
        episode.annotate("reward", score=float(i), by="the grader")
    whole = forks[1].export()
    with tarfile.open(fileobj=io.BytesIO(whole.data)) as tar:
        assert tar.extractfile("blob.bin").read() == BINARY  # type: ignore[union-attr]
        assert tar.extractfile("src/app.py").read() == b"print(1)"  # type: ignore[union-attr]
    changed = forks[1].export(changes=True)
    assert set(changed.files) == {"src/app.py", "in.txt"} and changed.deleted == ()
    with pytest.raises(TooLarge):
        forks[1].export(cap=1000)
    store = _store(pool)
    placements = [r.body for r in rows(store) if r.kind == "placement"]
    digest = hashlib.sha256(b"print(2)").hexdigest()
    assert sum(p["inputs"] == {"in.txt": digest} for p in placements) == 1
    ours = {e.run_id for e in forks}
    rewards = [r.body["score"] for r in rows(store) if r.kind == "annotation" and r.run_id in ours]
    assert sorted(rewards) == [0, 1, 2, 3]
    assert verify(store).ok
    store.close()
    for episode in forks:
        episode.discard()


def test_awaited_calls_leave_the_event_loop_free(pool: StockadePool, box: Box) -> None:
    async def main() -> tuple[list[int], float]:
        gaps: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(0.005)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        episode = pool.episode(profile=QUIET)
        codes = [(await episode.arun(ExecRequest(("true",)))).result.exit_code for _ in range(3)]
        done = await pool.arun(ExecRequest(("echo", "hi"), str(box.ws)))
        codes.append(done.result.exit_code)
        async for future in pool.amap(ExecRequest(("true",), str(box.ws)) for _ in range(20)):
            codes.append(future.result().result.exit_code)
        stop.set()
        await tick
        episode.discard()
        return codes, max(gaps)

    codes, worst = asyncio.run(main())
    assert codes == [0] * 24
    assert worst < 1.0, f"the event loop stalled for {worst:.3f}s"
