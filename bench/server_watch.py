"""Section 11b of the bench: what the warm server's kept watch costs a call, in a folder of
10,000 files (``uv run python bench/server_watch.py [--quick]``).

The folder is section 8's tree (``bench/changes.py``: 100 directories of 100 files); the
"command" is ``touch d000/f000``, one file written. Whole processes from the user-install
venv, interleaved (:func:`timing.interleaved`):

- **server, 10,000 files**: ``stockade run --mode danger-full-access --yes -- touch ...``
  through the warm server, in the tree: the default profile, whose folder the server watches
  with a kept watch (:mod:`stockade.run.kept`), so the result lists the changed file;
- **server, small folder**: the same in a folder of one file, where the kept watch costs
  next to nothing: the difference of the two medians is the watch's cost per call;
- **in-process, 10,000 files**: ``stockade --no-server run --agent big ...``, an agent whose
  workspace is the tree: the in-process CLI's per-call watch (``track_changes``), a full
  listing and an inotify watch per directory for every command;
- **in-process, small folder**: the same for an agent whose workspace holds one file.

Then, inside this process (no process start's noise), on the same tree: a per-call
``Watch(root)`` + the write + ``finish()``, against a kept watch's two settles around the
write (:meth:`stockade.run.kept.Kept.settle`).
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import changes  # bench/changes.py: the 10,000-file tree
import confined  # bench/confined.py: the timed command
import server  # bench/server.py: the section's environment, stopping its server
import startup  # bench/startup.py: the user-install venv
import timing  # bench/timing.py

TOUCH = ["touch", "d000/f000"]


def bench_server_watch(*, venv: Path, runs: int, warmup: int, inner: int) -> dict[str, Any]:
    """Every figure of this section (``inner``: samples of the in-process comparison)."""
    root = Path(tempfile.mkdtemp(prefix="stockade-bench-watch-"))
    env = server.section_env(root)
    big, small = root / "big", root / "small"
    big.mkdir()
    changes.plant(str(big))
    small.mkdir()
    (small / "d000").mkdir()
    (small / "d000" / "f000").touch()
    config = root / "config" / "stockade"
    config.mkdir()
    (config / "config.toml").write_text(
        f"[agents.big]\nworkspace = {json.dumps(str(big))}\n\n"
        f"[agents.small]\nworkspace = {json.dumps(str(small))}\n"
    )
    stockade = str(venv / "bin" / "stockade")
    run = [stockade, "run", "--mode", "danger-full-access", "--yes"]
    cases = {
        "server_big": confined.timed_command([*run, "--", *TOUCH], env, str(big)),
        "server_small": confined.timed_command([*run, "--", *TOUCH], env, str(small)),
        "in_process_big": confined.timed_command(
            [stockade, "--no-server", *run[1:], "--agent", "big", "--", *TOUCH], env, str(big)
        ),
        "in_process_small": confined.timed_command(
            [stockade, "--no-server", *run[1:], "--agent", "small", "--", *TOUCH], env, str(small)
        ),
    }
    try:
        listed = _listed(run, env, big)
        whole = timing.interleaved(cases, runs, warmup)
    finally:
        server.stop_server(env)
    try:
        inside = _inside(str(big), inner)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = {name: stats["median"] for name, stats in whole.items()}
    return {
        "runs": runs,
        "whole": whole,
        "listed_through_server": listed,
        "inside": inside,
        "watch_cost_ms": {
            "server": med["server_big"] - med["server_small"],
            "in_process": med["in_process_big"] - med["in_process_small"],
        },
    }


def _listed(run: list[str], env: dict[str, str], big: Path) -> list[str]:
    """What the server's result lists for the command (it must list the file it wrote)."""
    import subprocess

    done = subprocess.run(
        [*run, "--json", "--", *TOUCH], env=env, cwd=big, capture_output=True, check=False
    )
    found = json.loads(done.stdout).get("changes") or {}
    modified: list[str] = found.get("modified", [])
    if modified != ["d000/f000"]:
        raise SystemExit(f"bench: the server listed {found!r}, not the file written")
    return modified


def _inside(root: str, samples: int) -> dict[str, Any]:
    """Per-call watch against a kept watch's two settles, in this process."""
    from stockade.run.changes import Watch
    from stockade.run.kept import Kept

    path = f"{root}/d000/f000"

    def write() -> None:
        with open(path, "a") as handle:
            handle.write("x")

    per_call, kept_ms = [], []
    kept = Kept(root)
    try:
        for _ in range(samples):
            start = time.perf_counter()
            watch = Watch(root)
            write()
            watch.finish()
            per_call.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            kept.settle()
            write()
            kept.settle()
            kept_ms.append((time.perf_counter() - start) * 1000)
    finally:
        kept.close()
    return {
        "per_call_watch": timing.summarize(per_call),
        "kept_watch": timing.summarize(kept_ms),
        "ratio": statistics.median(per_call) / statistics.median(kept_ms),
    }


def report_server_watch(stats: dict[str, Any]) -> None:
    """The section's table."""
    print("\n11b. The warm server's kept watch, a folder of 10,000 files (whole processes)")
    print(timing.HEAD)
    labels = {
        "server_big": "server: default profile, 10,000 files (kept watch)",
        "server_small": "server: default profile, 1 file",
        "in_process_big": "in-process: agent workspace, 10,000 files (per-call watch)",
        "in_process_small": "in-process: agent workspace, 1 file",
    }
    for name, label in labels.items():
        print(timing.row(label, stats["whole"][name]))
    cost = stats["watch_cost_ms"]
    print(f"  the watch's cost per call: server {cost['server']:+.2f} ms, ", end="")
    print(f"in-process {cost['in_process']:+.2f} ms (10,000 files minus 1 file)")
    inside = stats["inside"]
    print("  inside one process, the same tree:")
    print(timing.row("per-call Watch(root) + write + finish()", inside["per_call_watch"]))
    print(timing.row("kept watch: settle + write + settle", inside["kept_watch"]))
    print(f"  per-call / kept: {inside['ratio']:.1f}x")


def main() -> int:
    """This section alone."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None, help="runs per case (default 40)")
    parser.add_argument("--quick", action="store_true", help="10 runs")
    args = parser.parse_args()
    runs = args.runs if args.runs is not None else (10 if args.quick else 40)
    venv, _rebuilt, _seconds = startup.ensure_user_venv()
    stats = bench_server_watch(venv=venv, runs=runs, warmup=2 if args.quick else 5, inner=5 * runs)
    report_server_watch(stats)
    print("\nBENCH " + json.dumps({"server_watch": stats}, sort_keys=True, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
