"""Section 8 of the bench: what tracking a command's file changes costs (``bench/run.py``).

A 10,000-file tree (100 directories of 100 empty files) in a temporary directory. Each
sample of the tracker is ``Watch(root)``, a "command" that appends to 3 files, and
``finish()``; the setup and the finish are also timed alone (the appends are not). The
raw baselines, interleaved with it in the same run: one Python ``lstat`` walk of the tree
(what a stat-based before/after snapshot pays, twice per command), the ``os.scandir`` walk
alone (no stat: what the tracker's before listing is built from) and ``find -printf``
(inode and ctime of every entry, from C). The target: the whole cost per command at most
20 ms. Then the first ``Watch`` in a fresh process that imported what the CLI imports: it
also imports ``inotify_simple`` (and with it ``ctypes``), which the CLI pays once per command.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import timing  # bench/timing.py

CHANGES_TARGET_MS = 20.0
DIRS, FILES, CHANGED = 100, 100, 3


COLD = r"""
import sys, time
import stockade.cli.run, stockade.host  # what the CLI has imported by then
from stockade.run.changes import Watch
start = time.perf_counter()
Watch(sys.argv[1]).finish()  # imports inotify_simple on first use
print((time.perf_counter() - start) * 1000)
"""


def plant(root: str) -> list[str]:
    """The tree; returns the files the timed "command" appends to."""
    for d in range(DIRS):
        os.mkdir(f"{root}/d{d:03}")
        for f in range(FILES):
            os.close(os.open(f"{root}/d{d:03}/f{f:03}", os.O_CREAT | os.O_WRONLY, 0o644))
    return [f"d{d:03}/f{d:03}" for d in range(0, DIRS, DIRS // CHANGED)][:CHANGED]


def lstat_walk(path: str) -> int:
    """Every entry stat-ed without following symlinks: the entries seen."""
    seen = 0
    with os.scandir(path) as entries:
        for entry in entries:
            entry.stat(follow_symlinks=False)
            seen += 1
            if entry.is_dir(follow_symlinks=False):
                seen += lstat_walk(entry.path)
    return seen


def scandir_walk(path: str) -> int:
    """Every entry's inode and type, straight from getdents: the entries seen."""
    seen = 0
    with os.scandir(path) as entries:
        for entry in entries:
            entry.inode()
            seen += 1
            if entry.is_dir(follow_symlinks=False):
                seen += scandir_walk(entry.path)
    return seen


def bench_changes(
    interleaved: timing.Interleave, runs: int = 20, warmup: int = 3
) -> dict[str, Any]:
    """Watch()+finish() on 10,000 files changing 3, against raw walks of the same tree."""
    from stockade.run.changes import Watch

    with tempfile.TemporaryDirectory(prefix="stockade-bench-changes-") as root:
        targets = plant(root)
        entries = DIRS * (FILES + 1)
        setup: list[float] = []
        finish: list[float] = []

        def tracked() -> int:
            start = time.perf_counter()
            watch = Watch(root)
            armed = time.perf_counter()
            for path in targets:
                with open(f"{root}/{path}", "a") as f:
                    f.write("x")
            done = time.perf_counter()
            changes = watch.finish()
            setup.append((armed - start) * 1000)
            finish.append((time.perf_counter() - done) * 1000)
            ok = changes.modified == tuple(sorted(targets)) and changes.total == CHANGED
            return 0 if ok and changes.method == "inotify" else 1

        cases: dict[str, Callable[[], int]] = {
            "tracked": tracked,
            "lstat_walk": lambda: 0 if lstat_walk(root) == entries else 1,
            "scandir_walk": lambda: 0 if scandir_walk(root) == entries else 1,
        }
        find = shutil.which("find")
        if find is not None:
            argv = [find, root, "-printf", "%i %C@\n"]
            cases["find"] = lambda: (
                subprocess.run(argv, stdout=subprocess.DEVNULL, check=False).returncode
            )
        stats = interleaved(cases, runs, warmup)
        cold = [
            float(
                subprocess.run(
                    [sys.executable, "-c", COLD, root], capture_output=True, text=True, check=True
                ).stdout
            )
            for _ in range(5)
        ]
    setup, finish = setup[warmup:], finish[warmup:]
    return {
        "runs": runs,
        "warmup": warmup,
        "entries": entries,
        "changed": CHANGED,
        **stats,
        "setup_ms": statistics.median(setup),
        "finish_ms": statistics.median(finish),
        "total_ms": statistics.median(s + f for s, f in zip(setup, finish, strict=True)),
        "cold_ms": statistics.median(cold),
        "target_ms": CHANGES_TARGET_MS,
    }


def report_changes(
    stats: dict[str, Any], row: Callable[[str, dict[str, float]], str], head: str
) -> None:
    """Print the section (``row`` and ``head`` are bench/run.py's ``_row`` and header)."""
    print(
        f"\n8. Changes, a tree of {stats['entries']:,} entries, {stats['changed']} files "
        f"changed, interleaved: {stats['runs']} runs each after {stats['warmup']} warm-up"
    )
    print(head)
    print(row("Watch(root) + 3 appends + finish()", stats["tracked"]))
    print(row("one Python lstat walk (os.scandir + DirEntry.stat)", stats["lstat_walk"]))
    print(
        row("one os.scandir walk, no stat (what the before listing reads)", stats["scandir_walk"])
    )
    if "find" in stats:
        print(row("find ROOT -printf '%i %C@\\n' (a child process)", stats["find"]))
    total = stats["total_ms"]
    ok = total <= CHANGES_TARGET_MS
    print(
        f"  setup {stats['setup_ms']:.2f} ms + finish {stats['finish_ms']:.2f} ms = {total:.2f} ms "
        f"median ({total / stats['lstat_walk']['median']:.2f}x one lstat walk)   "
        f"target <= {CHANGES_TARGET_MS:g} ms: {'met' if ok else 'NOT met'}"
    )
    cold = stats["cold_ms"]
    print(f"  first Watch+finish in a fresh process (imports inotify_simple): {cold:.1f} ms")


if __name__ == "__main__":  # this section alone: uv run python bench/changes.py
    import json

    figures = bench_changes(timing.interleaved)
    report_changes(figures, timing.row, timing.HEAD)
    print("\nBENCH " + json.dumps({"changes": figures}, sort_keys=True, separators=(",", ":")))
