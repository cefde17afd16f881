"""stockade-ray rollouts: episodes forked from one snapshot, and the sharded record (one command).

    uv run --locked --group ray python bench/rollouts.py           # 64 episodes x 8 steps
    uv run --locked --group ray python bench/rollouts.py --quick   # 16 episodes, fewer events
    uv run --locked --group ray python bench/rollouts.py --only forks   # one part (or shards)

1. **Rollouts.** ``--episodes`` episodes of 8 steps each (file reads and writes, an input
   file, ``sed -i``, a test run with ``python3``), forked from one snapshot of a small
   repository, through pools of 1, 2, 4 and 8 workers: steps per second from the first fork
   to the last result. The baseline, measured in the same run: the same steps under raw
   ``bwrap`` (no Stockade: no deciding, no record, no watching), each episode in a copy of
   the repository, run by as many threads as the pool has workers. The target: at 4 workers,
   within 1.5x of raw ``bwrap`` at 4 threads.
2. **A fork.** The time to fork one episode from a snapshot of a 10,000-file workspace and of
   a 100-file one, through a pool: from the layers' snapshot on the worker's node, as an
   overlay mount (root's; the first fork on a node makes that snapshot, reported apart) and
   as hard links (``LayeredSnapshots(overlay=False)``), and as a copy (``CopySnapshots``,
   what a node without layers does); then core's ``snapshots.fork_one`` alone, in this
   process, overlay and links, against a ``copytree`` of the same tree. The target: 50 ms
   for 10,000 files where layers are available.
3. **The sharded record.** Events per second into one signed chain (``append_many``, 64 a
   transaction, in this process, measured again just before and just after each sharded
   run, the mean of the two), then
   through 1, 2 and 4 shards (``stockade.record.writers.ShardedRecord``: a writer process
   per CPU, never more than the shards, fed 64 events a batch through a pipe, all shards at
   once, up to ``--window`` rounds in flight, anchored at the end). Measured before Ray
   starts: the writers are the driver's own processes. The control, in the same run: two
   and three processes appending chains of their own, nothing handed to them (what the
   machine's cores give sharding at best).
   The target: 4 shards at least 1.8x one chain.

Prints a table, then one line ``BENCH {...}`` of JSON with every figure. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # read when Ray is imported

WORKERS = (1, 2, 4, 8)
SHARDS = (1, 2, 4)
WINDOW = 8
"""Rounds of batches in flight to the shards: a writer appends one while the next ones are
pickled and sent (``--window 1`` waits for each round). Four shards on two cores are two
writers of two shards each, so a round is two batches a writer: eight rounds keep a writer
busy while the driver is not scheduled."""
PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"
"""The system's python3: a venv under /tmp (as ``uv run`` may use) is hidden by the sandbox."""
CODE = "def add(a, b):\n    return a + b\n"
TEST = "from app import add\nassert add(2, 3) == 5\n"
# Eight steps: argv, and whether the step hands in fix.py.
STEPS: tuple[tuple[tuple[str, ...], bool], ...] = (
    (("cat", "app.py"), False),
    (("cp", "fix.py", "app.py"), True),
    ((PYTHON, "test_app.py"), False),
    (("ls", "-la"), False),
    (("sed", "-i", "s/a + b/b + a/", "app.py"), False),
    ((PYTHON, "test_app.py"), False),
    (("cat", "notes.txt"), False),
    (("wc", "-l", "app.py"), False),
)


def repository(folder: Path, files: int = 0) -> None:
    folder.mkdir(parents=True)
    (folder / "app.py").write_text(CODE)
    (folder / "test_app.py").write_text(TEST)
    (folder / "notes.txt").write_text("notes\n")
    for i in range(files):
        sub = folder / "data" / f"d{i // 500}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i}.txt").write_text(f"file {i}\n")


def _pool_rate(config: Any, source: Path, workers: int, episodes: int) -> float:  # noqa: ANN401
    from stockade.request.spec import ExecRequest, Profile
    from stockade_ray import StockadePool

    agent = Profile(name="rollout", ask=())
    with StockadePool(workers, config) as pool:
        warm = pool.fork(pool.snapshot(str(source)), workers, profile=agent)
        for episode in warm:
            episode.run(ExecRequest(("true",))).result()
            episode.discard()
        start = time.perf_counter()
        forks = pool.fork(pool.snapshot(str(source)), episodes, profile=agent)
        futures = []
        for episode in forks:
            for argv, given in STEPS:
                files = {"fix.py": CODE.encode()} if given else None
                futures.append(episode.run(ExecRequest(argv), files=files))
        failed = sum(f.result().result.exit_code != 0 for f in futures)
        seconds = time.perf_counter() - start
        for episode in forks:
            episode.discard()
    if failed:
        print(f"  ({failed} steps did not exit 0)", file=sys.stderr)
    return len(futures) / seconds


def _raw_rate(source: Path, scratch: Path, threads: int, episodes: int) -> float:
    from stockade_bubblewrap.discover import system_binaries, wheel_binary

    found = system_binaries() or [wheel_binary() or "bwrap"]
    bwrap = found[0]  # the one the bubblewrap plugin would use

    def episode(i: int) -> int:
        ws = scratch / f"raw-{threads}-{i}"
        shutil.copytree(source, ws)
        failed = 0
        for argv, given in STEPS:
            if given:
                (ws / "fix.py").write_text(CODE)
            cmd = [bwrap, "--ro-bind", "/", "/", "--bind", str(ws), str(ws), "--dev", "/dev",
                   "--proc", "/proc", "--tmpfs", "/tmp",  # noqa: S108 - the sandbox's own /tmp
                   "--unshare-all", "--die-with-parent", "--chdir", str(ws), *argv]  # fmt: skip
            failed += subprocess.run(cmd, capture_output=True, check=False).returncode != 0
        return failed

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(episode, range(episodes)))
    return episodes * len(STEPS) / (time.perf_counter() - start)


def _fork_ms(config: Any, scratch: Path) -> dict[str, Any]:  # noqa: ANN401
    from stockade.request.spec import Profile
    from stockade_ray import StockadePool
    from stockade_ray.forks import CopySnapshots
    from stockade_ray.layered import LayeredSnapshots

    found: dict[str, Any] = {}
    kinds = {
        "overlay": LayeredSnapshots(),
        "links": LayeredSnapshots(overlay=False),
        "copy": CopySnapshots(),
    }
    with StockadePool(1, config) as pool:
        for files in (100, 10_000):
            source = scratch / f"fork-{files}"
            repository(source, files)
            snapshot = pool.snapshot(str(source))
            for kind, how in kinds.items():
                pool.snapshots = how
                times = []
                for _ in range(4):  # the first fork on a node makes its layers' snapshot
                    start = time.perf_counter()
                    (episode,) = pool.fork(snapshot, 1, profile=Profile(name="f", ask=()))
                    times.append((time.perf_counter() - start) * 1000)
                    assert episode.forked is not None
                    found[f"fork_{files}_{kind}_method"] = episode.forked.method
                    found[f"fork_{files}_{kind}_why"] = episode.forked.why
                    episode.discard()
                if kind == "overlay":
                    found[f"fork_{files}_first_on_node_ms"] = times[0]
                found[f"fork_{files}_{kind}_ms"] = sorted(times[1:])[1]
            found.update(_core_fork_ms(source, scratch, files))
            pool.snapshots = LayeredSnapshots()
    return found


def _core_fork_ms(source: Path, scratch: Path, files: int) -> dict[str, Any]:
    """``stockade.layers.snapshots.fork_one`` in this process (no Ray): the fork alone, the
    median of 5, overlay and links; and ``copytree`` of the same tree."""
    from stockade.layers import snapshots

    store = str(scratch / f"core-{files}")
    snap = snapshots.take(str(source), store=store)
    found: dict[str, Any] = {}
    try:
        for kind in ("overlay", "links"):
            times = []
            for _ in range(5):
                start = time.perf_counter()
                made = snapshots.fork_one(snap, store=store, overlay=kind == "overlay")
                times.append((time.perf_counter() - start) * 1000)
                snapshots.discard_fork(made.folder, store=store)
            found[f"core_fork_{files}_{kind}_ms"] = sorted(times)[2]
            found[f"core_fork_{files}_{kind}_is"] = made.method
        times = []
        for i in range(3):
            start = time.perf_counter()
            shutil.copytree(snap.folder, scratch / f"copy-{files}-{i}", symlinks=True)
            times.append((time.perf_counter() - start) * 1000)
            shutil.rmtree(scratch / f"copy-{files}-{i}")
        found[f"core_fork_{files}_copy_ms"] = sorted(times)[1]
    finally:
        snapshots.discard(snap, store=store)
    return found


APART = """
import sys, time
from stockade.record.chain import Chain
from stockade.record.events import AnnotationEvent
from stockade.record.store import Store
def events(run):
    return [AnnotationEvent(f"b{run}-{i}", run_id=f"run{run}", step=i, name="reward", score=i)
            for i in range(64)]
chain = Chain(Store(sys.argv[1]))
chain.append_many(events(-1))
sys.stdin.readline()
start = time.perf_counter()
for b in range(int(sys.argv[2])):
    chain.append_many(events(b))
print(time.perf_counter() - start)
"""
"""The control: one process appending a chain of its own, nothing handed to it."""


def _apart(scratch: Path, batches: int, processes: int) -> float:
    """Events per second of ``processes`` chains appended apart, each in a process of its
    own, nothing handed over: what two cores give sharding at best."""
    each = str(batches // processes)
    stores = [str(scratch / f"apart{processes}-{p}" / "store.db") for p in range(processes)]
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", APART, store, each],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for store in stores
    ]
    time.sleep(1.0)  # each has imported and opened its chain
    for run in runs:
        assert run.stdin is not None
        run.stdin.write("go\n")
        run.stdin.flush()
    took = max(float(run.communicate()[0]) for run in runs)
    return batches // processes * processes * 64 / took


def _shards(scratch: Path, count: int, window: int = WINDOW) -> dict[str, float]:
    from stockade.record.chain import Chain
    from stockade.record.events import AnnotationEvent
    from stockade.record.store import Store
    from stockade.record.writers import ShardedRecord

    def events(run: int) -> list[Any]:
        return [
            AnnotationEvent(f"b{run}-{i}", run_id=f"run{run}", step=i, name="reward", score=i)
            for i in range(64)
        ]

    batches = count // 64
    found: dict[str, float] = {}

    def one_chain(name: str) -> float:
        chain = Chain(Store(str(scratch / name / "store.db")))
        chain.append_many(events(-1))  # the key made and the store opened before timing
        start = time.perf_counter()
        for b in range(batches):
            chain.append_many(events(b))
        rate = batches * 64 / (time.perf_counter() - start)
        chain.close()
        return rate

    bases = []
    for shards in SHARDS:
        # One chain measured just before and just after each sharded run: the ratio compares
        # runs made under the same load (a baseline taken once drifted 5x on a shared
        # machine, and one taken only before still drifted 2x within a part).
        before = one_chain(f"one{shards}")
        main = Chain(Store(str(scratch / f"sharded{shards}" / "store.db")))
        record = ShardedRecord(main, shards)  # started, its writers' chains open
        start = time.perf_counter()
        pending: list[Any] = []
        for b in range(0, batches, shards):  # one batch to every shard at once
            pending += record.send({i: events(b + i) for i in range(shards)})
            if len(pending) >= window * shards:  # the oldest round stored before the next
                record.wait(pending[:shards])
                pending = pending[shards:]
        record.wait(pending)
        record.anchor()
        rate = (batches // shards * shards) * 64 / (time.perf_counter() - start)
        base = (before + one_chain(f"after{shards}")) / 2
        bases.append(base)
        found[f"shards_{shards}_events_per_s"] = rate
        found[f"shards_{shards}_chain_events_per_s"] = base
        found[f"shards_{shards}_ratio"] = rate / base
        record.close()
        main.close()
    found["chain_1_events_per_s"] = sorted(bases)[len(bases) // 2]
    for processes in (2, 3):  # the control, between one chain measured before and after
        before = one_chain(f"one-apart{processes}")
        rate = _apart(scratch, batches, processes)
        base = (before + one_chain(f"after-apart{processes}")) / 2
        found[f"apart_{processes}_events_per_s"] = rate
        found[f"apart_{processes}_ratio"] = rate / base
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description="stockade-ray rollouts bench")
    parser.add_argument("--quick", action="store_true", help="16 episodes, fewer events")
    parser.add_argument("--address", help="join this Ray cluster instead of starting one")
    parser.add_argument("--only", choices=("shards", "forks", "rollouts"), help="one part only")
    parser.add_argument("--window", type=int, default=WINDOW, help="rounds in flight to shards")
    parser.add_argument("--events", type=int, help="events a sharded run (default 25,600)")
    args = parser.parse_args()
    from stockade.config.schema import Config, StoreConfig

    episodes, events = (16, 6400) if args.quick else (64, 25600)
    events = args.events or events
    base = Path.home() / ".stockade-bench"
    base.mkdir(mode=0o700, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=base))
    figures: dict[str, Any] = {"episodes": episodes, "steps_per_episode": len(STEPS)}
    if args.only in (None, "shards"):  # before Ray's daemons start: no part of it is Ray's
        figures.update(_shards(scratch, events, args.window))
    if args.only == "shards":
        shutil.rmtree(scratch, ignore_errors=True)
        _table(figures)
        print("BENCH " + json.dumps(figures, default=float))
        return 0
    import ray

    temp = tempfile.mkdtemp(prefix="sr-", dir="/tmp")
    if args.address:
        ray.init(address=args.address, log_to_driver=False)
    else:
        for attempt in range(3):  # a loaded machine may miss Ray's 30 s for a raylet to start
            try:
                ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
                break
            except Exception:
                ray.shutdown()
                if attempt == 2:
                    raise
    try:
        source = scratch / "repository"
        repository(source)
        config = Config(store=StoreConfig(path=str(scratch / "state" / "store.db")))
        if args.only in (None, "forks"):
            figures.update(_fork_ms(config, scratch))
        for workers in WORKERS if args.only in (None, "rollouts") else ():
            figures[f"raw_{workers}_steps_per_s"] = _raw_rate(source, scratch, workers, episodes)
            rate = _pool_rate(config, source, workers, episodes)
            figures[f"pool_{workers}_steps_per_s"] = rate
            figures[f"raw_over_pool_{workers}"] = figures[f"raw_{workers}_steps_per_s"] / rate
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    _table(figures)
    print("BENCH " + json.dumps(figures, default=float))
    return 0


def _table(f: dict[str, Any]) -> None:
    if "pool_1_steps_per_s" in f:
        print(f"rollouts: {f['episodes']} episodes x {f['steps_per_episode']} steps, forked")
    for w in WORKERS if "pool_1_steps_per_s" in f else ():
        ratio = f[f"raw_over_pool_{w}"]
        mark = f" (target <= 1.5x: {_met(ratio <= 1.5)})" if w == 4 else ""
        pool, raw = f[f"pool_{w}_steps_per_s"], f[f"raw_{w}_steps_per_s"]
        print(f"  {w} workers {pool:8.1f} steps/s   raw bwrap x{w} {raw:8.1f} steps/s"
              f"   raw/pool {ratio:5.2f}x{mark}")  # fmt: skip
    for files in (100, 10_000) if "fork_100_copy_ms" in f else ():
        over, links, copy = (f[f"fork_{files}_{k}_ms"] for k in ("overlay", "links", "copy"))
        mark = f" (target <= 50 ms: {_met(over <= 50)})" if files == 10_000 else ""
        first = f[f"fork_{files}_first_on_node_ms"]
        print(f"fork {files:6d} files, a pool's: {f[f'fork_{files}_overlay_method']} "
              f"{over:8.1f} ms{mark}  {f[f'fork_{files}_links_method']} {links:8.1f} ms"
              f"  copy {copy:8.1f} ms  first on a node {first:8.1f} ms")  # fmt: skip
        core = [f"{f[f'core_fork_{files}_{k}_is']} {f[f'core_fork_{files}_{k}_ms']:8.2f} ms"
                for k in ("overlay", "links")]  # fmt: skip
        print(f"  core's fork alone: {'  '.join(core)}"
              f"  copytree {f[f'core_fork_{files}_copy_ms']:8.1f} ms")  # fmt: skip
    if "chain_1_events_per_s" in f:
        print(f"record: one chain {f['chain_1_events_per_s']:8.0f} events/s (median)")
    for s in SHARDS if "chain_1_events_per_s" in f else ():
        mark = f" (target >= 1.8x: {_met(f[f'shards_{s}_ratio'] >= 1.8)})" if s == 4 else ""
        print(f"  {s} shards {f[f'shards_{s}_events_per_s']:8.0f} events/s"
              f"  {f[f'shards_{s}_ratio']:5.2f}x one chain around it"
              f" ({f[f'shards_{s}_chain_events_per_s']:.0f}){mark}")  # fmt: skip
    for p in (2, 3) if "apart_2_ratio" in f else ():
        print(f"  control: {p} chains apart, nothing handed over"
              f" {f[f'apart_{p}_events_per_s']:8.0f} events/s"
              f"  {f[f'apart_{p}_ratio']:5.2f}x one chain around it")  # fmt: skip
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


def _met(ok: bool) -> str:  # noqa: FBT001
    return "met" if ok else "not met"


if __name__ == "__main__":
    sys.exit(main())
