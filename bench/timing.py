"""Timing shared by every bench section: interleaved samples, their summary, a table row.

``bench/run.py`` and each section import this module, never each other, so a section can
run alone (``uv run python bench/changes.py``) without importing the whole bench.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence

Stats = dict[str, float]
"""A case's figures in milliseconds: ``median``, ``p90``, ``min``, and the sample count ``n``."""

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
) -> dict[str, Stats]:
    """Time each case ``runs`` times, rotating the order every iteration (AB, BA, ...).

    Each case returns an exit status; anything but 0 stops the bench (outside the timing).
    ``after``, if given, runs after every timed call, outside the timing.
    """
    names = list(cases)
    for _ in range(warmup):
        for name in names:
            _check(name, cases[name]())
    samples: dict[str, list[float]] = {name: [] for name in names}
    gc.collect()
    for i in range(runs):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            status = cases[name]()
            samples[name].append((time.perf_counter() - start) * 1000)
            _check(name, status)
            if after is not None:
                after()
    return {name: summarize(values) for name, values in samples.items()}


def _check(name: str, status: int) -> None:
    if status != 0:
        raise SystemExit(f"bench: {name} exited with status {status}")


def row(label: str, stats: Stats) -> str:
    """One table line: ``label``, then the median, p90 and min under :data:`HEAD`."""
    return f"  {label:<62} {stats['median']:>10.3f} {stats['p90']:>10.3f} {stats['min']:>10.3f}"
