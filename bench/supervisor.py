"""The Landlock supervisor's price: ``true``, and a build's shape (10,000 new files).

Each case runs the same request through two hosts in the same process, interleaved: one
with the supervisor (the default) and one with ``supervise = false``, today's behaviour
without it (the host snapshots the protected paths before the run and puts them back
after it). The workspace is the bench's planted repository, so both have real protected
paths to keep. Targets: ``true`` at most +1 ms over the run without the supervisor; 10,000
files created at most 1.5x its time.

The same run measures the mechanism's floor (:func:`floor`): ``bench/seccomp_floor.c``,
compiled here with the system's C compiler (skipped, and said so, without one), creates the
same 10,000 files with no interpreter on either side: plain, with each create notified and
let through (the round trip alone), and answered as a sound supervisor must at the least
(the path read once, the file made by the supervisor, its descriptor handed back with
``SECCOMP_IOCTL_NOTIF_ADDFD``); each on any CPU and with both threads kept on one.

Run alone: ``uv run python bench/supervisor.py [--runs N] [--dir DIR]``. ``--dir`` puts the
workspace in ``DIR`` (a tmpfs, say) instead of the system's temporary folder: on a disk
shared with other work a create's own cost swings with their traffic (tens of µs to more
than a ms of CPU), and the ratio with it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import confined  # bench/confined.py: the planted workspace
import timing  # bench/timing.py

TRUE_TARGET_MS = 1.0  # ``true`` with the supervisor, over the run without it
FILES_TARGET_RATIO = 1.5  # creating FILES files with the supervisor, against without it
FILES = 10_000
MAKE = f"""
import os
out = os.path.join("out", str(os.getpid()))
os.makedirs(out)
for i in range({FILES}):
    os.close(os.open(os.path.join(out, f"f{{i}}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
"""


def bench_supervisor(
    runs: int, warmup: int, files_runs: int = 5, where: str | None = None
) -> dict[str, Any]:
    """``true`` and :data:`FILES` creates, with and without the supervisor (the workspace
    in ``where``, or the system's temporary folder)."""
    from stockade_landlock import supervisor
    from stockade_landlock.provider import LandlockSandbox

    from stockade.config.schema import Config, PluginsConfig
    from stockade.host import Host
    from stockade.request.spec import ExecRequest
    from stockade.testing import AllowAll  # the bench's own python -c is not a person's call

    probe = LandlockSandbox.probe()
    if not probe.usable:
        return {"skipped": f"Landlock is not usable here: {probe.detail}"}
    why = supervisor.unavailable()
    if why is not None:
        return {"skipped": f"no supervisor here: {why}"}
    own = _thread_cpu()
    scratch = Path(tempfile.mkdtemp(prefix="stockade-bench-supervisor-", dir=where))
    load = os.getloadavg()
    off = PluginsConfig(settings={"landlock": {"supervise": False}})
    hosts = {
        "supervised": Host(Config(sandbox="landlock"), plugins=[AllowAll()]),
        "unsupervised": Host(Config(sandbox="landlock", plugins=off), plugins=[AllowAll()]),
    }
    try:
        ws = confined.plant_workspace(scratch)

        cpu: dict[str, list[float]] = {}

        def case(host: Any, argv: list[str], tag: str) -> Any:  # noqa: ANN401 - lazy types
            request = ExecRequest(argv, str(ws), mode=confined.MODE, origin="cli", timeout=600)

            def call() -> int:
                before = _cpu_ms()
                result = host.run(request)
                cpu.setdefault(tag, []).append(_cpu_ms() - before)
                return result.exit_code if result.exit_code is not None else -1

            return call

        true = timing.interleaved(
            {name: case(host, ["true"], f"true {name}") for name, host in hosts.items()},
            runs,
            warmup,
        )
        make = [sys.executable, "-S", "-c", MAKE]
        files = timing.interleaved(
            {name: case(host, make, f"files {name}") for name, host in hosts.items()},
            files_runs,
            1,
            after=lambda: _set_aside(ws / "out", scratch / "set-aside"),
        )
        python = timing.interleaved(  # the interpreter's own start, for scale
            {"python": case(hosts["supervised"], [sys.executable, "-S", "-c", "pass"], "python")},
            files_runs,
            1,
        )
    finally:
        for host in hosts.values():
            host.close()
        shutil.rmtree(scratch, ignore_errors=True)
        own.close()
    true_over = true["supervised"]["median"] - true["unsupervised"]["median"]
    files_ratio = files["supervised"]["median"] / files["unsupervised"]["median"]
    per_call_us = (files["supervised"]["median"] - files["unsupervised"]["median"]) / FILES * 1000
    cpu_ms = {tag: statistics.median(values) for tag, values in cpu.items()}
    creates = [cpu / served * 1e6 for cpu, served in own.runs if served >= FILES]
    return {
        "load": [*load, *os.getloadavg()],
        "where": str(scratch.parent),
        "supervisor_cpu_us_per_create": statistics.median(creates) if creates else None,
        "cpu_ms": cpu_ms,
        "true_cpu_over_ms": cpu_ms["true supervised"] - cpu_ms["true unsupervised"],
        "files_cpu_ratio": cpu_ms["files supervised"] / cpu_ms["files unsupervised"],
        "runs": runs,
        "files_runs": files_runs,
        "true": true,
        "files": files,
        "python": python["python"],
        "true_overhead_ms": true_over,
        "files_ratio": files_ratio,
        "per_create_us": per_call_us,
        "true_target_ms": TRUE_TARGET_MS,
        "files_target_ratio": FILES_TARGET_RATIO,
    }


FLOOR_MODES = ("plain", "continue", "addfd")
FLOOR_SOURCE = Path(__file__).with_name("seccomp_floor.c")
SHM = "/dev/shm"  # noqa: S108 - a tmpfs for the bench's own scratch folder (mkdtemp in it)


def floor(where: str | None = None, runs: int = 5) -> dict[str, Any]:
    """Microseconds a create, the median of ``runs``, for each of :data:`FLOOR_MODES`, on
    any CPU (``MODE``) and with both threads on CPU 0 (``MODE pinned``); or why not. In
    ``where``, else in ``/dev/shm`` where it is a folder (a tmpfs: the mechanism's price, not
    a disk's, whose creates swing tenfold), else the system's temporary folder."""
    if where is None and os.path.isdir(SHM) and os.access(SHM, os.W_OK):
        where = SHM
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return {"skipped": "no C compiler here (cc or gcc)"}
    found: dict[str, Any] = {"where": where or tempfile.gettempdir()}
    scratch = Path(tempfile.mkdtemp(prefix="stockade-bench-floor-", dir=where))
    try:
        binary = scratch / "seccomp_floor"
        made = subprocess.run(
            [compiler, "-O2", "-pthread", "-o", str(binary), str(FLOOR_SOURCE)],
            capture_output=True,
            text=True,
            check=False,
        )
        if made.returncode != 0:
            return {"skipped": f"the floor did not compile: {made.stderr.strip()[:200]}"}
        for pin in ("0", "1"):
            for mode in FLOOR_MODES:
                times = []
                for run in range(runs):  # each in a folder of its own, all removed at the end
                    folder = scratch / f"{mode}-{pin}-{run}"
                    out = subprocess.run(
                        [str(binary), str(folder), mode, pin],
                        capture_output=True,
                        text=True,
                        check=False,
                    )
                    if out.returncode != 0:
                        return {"skipped": f"the floor failed ({mode}): {out.stderr.strip()[:200]}"}
                    times.append(float(out.stdout.split()[-1]))
                found[mode + (" pinned" if pin == "1" else "")] = statistics.median(times)
        return found
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def report_floor(found: dict[str, Any]) -> None:
    """Print the floor's lines."""
    if "skipped" in found:
        print(f"  the mechanism's floor: skipped, {found['skipped']}")
        return
    print(
        f"  the mechanism's floor, in C, in {found['where']} "
        "(us a create; any CPU / both threads on CPU 0):"
    )
    for mode in FLOOR_MODES:
        print(f"    {mode:<9} {found[mode]:7.1f} / {found[mode + ' pinned']:7.1f}")
    print(
        f"    a sound answer (addfd) costs {found['addfd'] / found['plain']:.2f}x a plain "
        f"create on any CPU, {found['addfd pinned'] / found['plain pinned']:.2f}x on one "
        f"(the files target: {FILES_TARGET_RATIO}x)"
    )


def _set_aside(folder: Path, aside: Path) -> None:
    """Move a run's files out of the workspace (the next run's host walks only its own);
    removed with the bench's folder at the end, not between runs: on ext4 a create after
    10,000 removals scans for inodes it may not reuse yet (``recently_deleted``), which made
    one unsupervised run of 10,000 creates cost anything from 0.2 to 2.7 s."""
    aside.mkdir(exist_ok=True)
    folder.rename(aside / str(len(os.listdir(aside))))


class _thread_cpu:  # noqa: N801 - used as a context, named for what it measures
    """The supervisor thread's own CPU time and calls answered, per run (its ``_serve``
    wrapped for the bench's lifetime): the supervisor's cost alone, which neither the
    command's kernel time nor the machine's load inflates much."""

    def __init__(self) -> None:
        from stockade_landlock.supervisor.serve import Supervisor

        self.runs: list[tuple[float, int]] = []
        self._class, self._serve = Supervisor, Supervisor._serve
        serve = self._serve

        def timed(supervisor: Supervisor) -> None:
            start = time.thread_time()
            try:
                serve(supervisor)
            finally:
                self.runs.append((time.thread_time() - start, supervisor.served))

        Supervisor._serve = timed  # type: ignore[method-assign,assignment]

    def close(self) -> None:
        self._class._serve = self._serve  # type: ignore[method-assign]


def _cpu_ms() -> float:
    """CPU time used so far by this process (the host and its supervisor threads) and its
    waited-for children (the commands), in milliseconds: unlike wall time, not inflated
    by other programs on a loaded machine."""
    own, children = (
        resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return (own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime) * 1000


def report(found: dict[str, Any]) -> None:
    """Print the section's table."""
    if "skipped" in found:
        print(f"\nLandlock supervisor: skipped, {found['skipped']}")
        return
    print(f"\nLandlock supervisor ({found['runs']} runs of true, {found['files_runs']} of files)")
    before, after = found["load"][:3], found["load"][3:]
    print(
        f"  workspace in {found['where']}; load average {before[0]:.2f} {before[1]:.2f} "
        f"{before[2]:.2f} before, {after[0]:.2f} {after[1]:.2f} {after[2]:.2f} after"
    )
    print(timing.HEAD)
    for name in ("supervised", "unsupervised"):
        print(timing.row(f"true, {name}", found["true"][name]))
    for name in ("supervised", "unsupervised"):
        print(timing.row(f"{FILES} files created, {name}", found["files"][name]))
    print(timing.row("python -S -c pass, supervised (for scale)", found["python"]))
    over, ratio = found["true_overhead_ms"], found["files_ratio"]
    print(
        f"  true: {over:+.2f} ms (target +{TRUE_TARGET_MS} ms: "
        f"{'met' if over <= TRUE_TARGET_MS else 'not met'})"
    )
    print(
        f"  files: {ratio:.2f}x, {found['per_create_us']:.0f} us per create "
        f"(target {FILES_TARGET_RATIO}x: {'met' if ratio <= FILES_TARGET_RATIO else 'not met'})"
    )
    print(
        f"  CPU (host and command, median): true {found['true_cpu_over_ms']:+.2f} ms, files "
        f"{found['files_cpu_ratio']:.2f}x (what a quiet machine's wall time would show)"
    )
    per = found["supervisor_cpu_us_per_create"]
    if per is not None:
        print(f"  the supervisor thread's own CPU: {per:.0f} us per call (files runs)")


def main() -> int:
    """Run the section alone."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--dir", default=None, help="the folder to put the workspace in")
    args = parser.parse_args()
    found = bench_supervisor(args.runs, max(args.runs // 10, 2), where=args.dir)
    found["floor"] = floor(args.dir)
    report(found)
    report_floor(found["floor"])
    print("BENCH " + json.dumps(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
