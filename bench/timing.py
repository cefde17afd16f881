"""Timing shared by every bench section: interleaved samples, their summary, a table row.

``bench/run.py`` and each section import this module, never each other, so a section can
run alone (``uv run python bench/changes.py``) without importing the whole bench.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

Stats = dict[str, float]
"""A case's figures in milliseconds: ``median``, ``p90``, ``min``, and the sample count ``n``;
with ``cpu=True``, also ``cpu_median`` and ``cpu_min``: the calling thread's CPU time, which
a loaded machine inflates far less than the wall clock (a call that waits on another
process or thread is not counted)."""

Interleave = Callable[[dict[str, Callable[[], int]], int, int], dict[str, Stats]]
"""The shape of :func:`interleaved` as a section takes it: ``(cases, runs, warmup)``."""

HEAD = f"  {'':<62} {'median ms':>10} {'p90 ms':>10} {'min ms':>10}"
"""The header above :func:`row` lines."""


def summarize(samples: Sequence[float]) -> Stats:
    """Median, p90 and min of samples in milliseconds."""
    p90 = statistics.quantiles(samples, n=10, method="inclusive")[-1]
    return {
        "median": statistics.median(samples),
        "p90": p90,
        "min": min(samples),
        "n": len(samples),
    }


def interleaved(
    cases: dict[str, Callable[[], int]],
    runs: int,
    warmup: int,
    after: Callable[[], None] | None = None,
    *,
    cpu: bool = False,
) -> dict[str, Stats]:
    """Time each case ``runs`` times, rotating the order every iteration (AB, BA, ...).

    Each case returns an exit status; anything but 0 stops the bench (outside the timing).
    ``after``, if given, runs after every timed call, outside the timing. ``cpu`` adds the
    thread's CPU time of each call (see :data:`Stats`).
    """
    names = list(cases)
    for _ in range(warmup):
        for name in names:
            _check(name, cases[name]())
    samples: dict[str, list[float]] = {name: [] for name in names}
    spent: dict[str, list[float]] = {name: [] for name in names}
    gc.collect()
    for i in range(runs):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            began = time.thread_time()
            start = time.perf_counter()
            status = cases[name]()
            samples[name].append((time.perf_counter() - start) * 1000)
            spent[name].append((time.thread_time() - began) * 1000)
            _check(name, status)
            if after is not None:
                after()
    found = {name: summarize(values) for name, values in samples.items()}
    if cpu:
        for name, values in spent.items():
            found[name]["cpu_median"] = statistics.median(values)
            found[name]["cpu_min"] = min(values)
    return found


def _check(name: str, status: int) -> None:
    if status != 0:
        raise SystemExit(f"bench: {name} exited with status {status}")


def row(label: str, stats: Stats) -> str:
    """One table line: ``label``, then the median, p90 and min under :data:`HEAD` (and the
    CPU median and min under :data:`CPU_HEAD` when the stats have them)."""
    line = f"  {label:<62} {stats['median']:>10.3f} {stats['p90']:>10.3f} {stats['min']:>10.3f}"
    if "cpu_median" in stats:
        line += f" {stats['cpu_median']:>10.3f} {stats['cpu_min']:>10.3f}"
    return line


CPU_HEAD = HEAD + f" {'cpu median':>10} {'cpu min':>10}"
"""The header above :func:`row` lines of stats taken with ``cpu=True``."""


def table(title: str, rows: Sequence[tuple[str, Stats]]) -> None:
    """Print a section's table: ``title`` on a line of its own after a blank one, the
    header (with the CPU columns when the stats have them), then one :func:`row` a case."""
    print(f"\n{title}")
    print(CPU_HEAD if rows and "cpu_median" in rows[0][1] else HEAD)
    for label, stats in rows:
        print(row(label, stats))


def main(
    name: str,
    doc: str,
    bench: Callable[[int], dict[str, Any]],
    report: Callable[[dict[str, Any]], None],
    *,
    runs: int,
) -> int:
    """A section run alone: ``--runs N`` (default ``runs``), its table, then one ``BENCH``
    line of JSON (``{name: figures}``) that ``bench/run.py`` and a reader's scripts parse."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--runs", type=int, default=runs)
    args = parser.parse_args()
    stats = bench(args.runs)
    report(stats)
    print("\nBENCH " + json.dumps({name: stats}, sort_keys=True, separators=(",", ":")))
    return 0
