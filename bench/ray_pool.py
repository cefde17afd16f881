"""stockade-ray: what the pool costs and what it buys, on this machine (one command).

    uv run --locked --group ray python bench/ray_pool.py           # the full run
    uv run --locked --group ray python bench/ray_pool.py --quick   # fewer samples

1. **Per step, for ``true``.** The same request (``workspace-write``, the node's sandbox) run
   by an in-process ``Host.run`` and by ``StockadePool.run(...).result()`` on one warm worker,
   interleaved: the difference of the medians is what shipping a step to a worker and
   recording what comes back adds. Then 200 ``true`` through ``map`` on 2 workers: the
   per-step cost when steps overlap.
2. **Parallelism, for ``sleep 0.2``.** Commands per second through pools of 1, 2, 4 and 8
   workers, against one host running them one after another (the baseline, measured here).
3. **The recorder.** Events per second appended to one signed chain: one transaction per
   event (``Chain.append``) and 64 per transaction (``Chain.append_many``, what the pool's
   collector does), from the events of real runs.

Prints a table, then one line ``BENCH {...}`` of JSON with every figure. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

import timing  # bench/timing.py

if TYPE_CHECKING:
    from stockade.config.schema import Config
    from stockade.host import Host
    from stockade.request.spec import ExecRequest

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # read when Ray is imported

SLEEP = 0.2
ACTORS = (1, 2, 4, 8)


def main() -> int:
    parser = argparse.ArgumentParser(description="stockade-ray bench")
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    args = parser.parse_args()
    import ray

    from stockade.config.schema import Config, StoreConfig
    from stockade.host import Host
    from stockade.request.spec import ExecRequest
    from stockade.testing import EventLog

    runs, warmup, sleeps = (20, 3, 8) if args.quick else (60, 5, 16)
    base = Path.home() / ".stockade-bench"
    base.mkdir(mode=0o700, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=base))
    temp = tempfile.mkdtemp(prefix="sr-", dir="/tmp")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
    figures: dict[str, Any] = {}
    try:
        ws = scratch / "ws"
        ws.mkdir()
        config = Config(store=StoreConfig(path=str(scratch / "state" / "store.db")))
        log = EventLog()
        host = Host(config, plugins=[log])
        true = ExecRequest(["true"], str(ws), mode="workspace-write")
        sleep = ExecRequest(["sleep", str(SLEEP)], str(ws), mode="workspace-write")

        figures.update(_per_step(config, host, true, runs, warmup))
        figures.update(_parallelism(config, host, true, sleep, sleeps))
        # 3. the recorder
        events = [e for e in log.events if e.kind in ("action", "permission", "result")][:3]
        figures.update(_recorder(scratch, events, 600 if args.quick else 3000))
        host.close()
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    _table(figures, sleeps)
    print("BENCH " + json.dumps(figures, default=float))
    return 0


def _per_step(
    config: Config, host: Host, true: ExecRequest, runs: int, warmup: int
) -> dict[str, Any]:
    """``true`` through the host and through a one-worker pool, interleaved; then 200 of
    them through ``map`` on 2 workers."""
    from stockade_ray import StockadePool

    figures: dict[str, Any] = {}
    with StockadePool(1, config) as pool:

        def by_host() -> int:
            return host.run(true).exit_code or 0

        def by_pool() -> int:
            return pool.run(true).result().result.exit_code or 0

        step = timing.interleaved({"host": by_host, "pool": by_pool}, runs, warmup)
    figures["true_host_ms"], figures["true_pool_ms"] = step["host"], step["pool"]
    figures["true_overhead_ms"] = step["pool"]["median"] - step["host"]["median"]
    figures["true_ratio"] = step["pool"]["median"] / step["host"]["median"]
    with StockadePool(2, config) as pool:
        list(pool.map([true] * 20))  # warm
        start = time.perf_counter()
        done = [f.result() for f in pool.map([true] * 200)]
        seconds = time.perf_counter() - start
    assert all(d.result.exit_code == 0 for d in done)
    figures["true_map_2_ms_per_step"] = seconds / 200 * 1000
    return figures


def _parallelism(
    config: Config, host: Host, true: ExecRequest, sleep: ExecRequest, sleeps: int
) -> dict[str, Any]:
    """``sleep`` commands per second: one host one after another, then each pool size."""
    from stockade_ray import StockadePool

    start = time.perf_counter()
    for _ in range(sleeps // 2):
        host.run(sleep)
    baseline = (sleeps // 2) / (time.perf_counter() - start)
    figures: dict[str, Any] = {"sleep_host_per_s": baseline}
    for count in ACTORS:
        with StockadePool(count, config) as pool:
            list(pool.map([true] * count))  # warm every worker
            start = time.perf_counter()
            done = [f.result() for f in pool.map([sleep] * sleeps)]
            rate = sleeps / (time.perf_counter() - start)
        assert all(d.result.exit_code == 0 for d in done)
        figures[f"sleep_pool_{count}_per_s"] = rate
        figures[f"sleep_pool_{count}_ratio"] = rate / baseline
    return figures


def _recorder(scratch: Path, events: list[Any], count: int) -> dict[str, float]:
    """Events per second into a fresh signed chain: one per transaction, then 64."""
    from stockade.record.chain import Chain
    from stockade.record.store import Store

    many = [attrs.evolve(events[i % 3], action_id=f"bench{i // 3:08d}") for i in range(count)]
    found = {}
    for name, size in (("one", 1), ("batch64", 64)):
        chain = Chain(Store(str(scratch / f"rec-{name}" / "store.db")))
        rates = []
        for _ in range(3):
            start = time.perf_counter()
            for i in range(0, count, size):
                if size == 1:
                    chain.append(many[i])
                else:
                    chain.append_many(many[i : i + size])
            rates.append(count / (time.perf_counter() - start))
        chain.close()
        found[f"recorder_{name}_events_per_s"] = statistics.median(rates)
    return found


def _table(f: dict[str, Any], sleeps: int) -> None:
    print(timing.HEAD)
    print(timing.row("true, in-process Host.run (baseline)", f["true_host_ms"]))
    print(timing.row("true, StockadePool.run().result(), 1 worker", f["true_pool_ms"]))
    over, ratio = f["true_overhead_ms"], f["true_ratio"]
    print(f"  per-step overhead of the pool: {over:+.2f} ms median ({ratio:.2f}x the host)")
    print(f"  true x200 through map on 2 workers: {f['true_map_2_ms_per_step']:.2f} ms per step")
    print(f"\n  sleep {SLEEP} x{sleeps}: commands per second (ratio to one host, one by one)")
    print(f"  {'one host, sequential (baseline)':<40} {f['sleep_host_per_s']:8.2f}/s")
    for count in ACTORS:
        rate, ratio = f[f"sleep_pool_{count}_per_s"], f[f"sleep_pool_{count}_ratio"]
        print(f"  {f'pool of {count} worker(s)':<40} {rate:8.2f}/s  {ratio:5.2f}x")
    one, batch = f["recorder_one_events_per_s"], f["recorder_batch64_events_per_s"]
    print("\n  recorder, events per second into one signed chain")
    print(f"  {'one event per transaction (append)':<40} {one:8.0f}/s")
    print(f"  {'64 per transaction (append_many)':<40} {batch:8.0f}/s  {batch / one:5.2f}x")


if __name__ == "__main__":
    sys.exit(main())
