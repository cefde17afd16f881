"""The bubblewrap section of the bench: ``Host.run`` confined against raw ``bwrap``.

The raw baseline is the very command line the provider builds for the same request: the
options it writes to its ``--args`` memfd (mount layout, ``--unshare-all``, ``--clearenv``
and ``--setenv``, ``--argv0``) are put on bwrap's command line instead, and the seccomp
filter is handed over by an fd rewound before each run. So the difference between the two is
what Stockade adds: resolving, classifying, deciding, the layout scan, the memfds, the
executor's capture and bookkeeping, and the result.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

HOST_TARGET_MS = 1.5  # Host.run under bubblewrap may add at most this much over raw bwrap
LANDLOCK_TARGET_MS = 2.0  # Host.run under landlock may add at most this over raw subprocess
MODE: Final = "workspace-write"
PEERS = {
    # Each peer's own CLI for "a sandboxed true", and the speed-up Stockade's CLI aims for.
    "codex": (["codex", "sandbox", "linux", "--", "true"], 2.0),
    "srt": (["srt", "true"], 5.0),
}


def timed_command(argv: list[str], env: dict[str, str], cwd: str) -> Callable[[], int]:
    """A case for ``interleaved``: run ``argv`` silently, return its exit status."""

    def call() -> int:
        return subprocess.run(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        ).returncode

    return call


def plant_workspace(root: Path) -> Path:
    """A small but real workspace: a repository with a nested one and some files."""
    ws = root / "ws"
    for sub in ("src/pkg", "tests", "vendor/lib/.git", ".git/hooks", "docs"):
        (ws / sub).mkdir(parents=True)
    for i in range(40):
        (ws / "src" / "pkg" / f"m{i}.py").write_text("x = 1\n")
    (ws / "README.md").write_text("bench workspace\n")
    return ws


def raw_argv(host: Any, request: Any) -> tuple[list[str], bytes]:  # noqa: ANN401 - lazy types
    """The provider's bwrap invocation for ``request`` with its options on the command line.

    Returns the argv (``--seccomp`` names fd ``{fd}``, filled in by the caller) and the BPF.
    """
    admitted = host.prepare(host.admit(request))
    plan = admitted.plan
    try:
        args_fd, filter_fd = plan.pass_fds
        options = _read_all(args_fd).split(b"\0")[:-1]
        bpf = _read_all(filter_fd)
    finally:
        admitted.provider.release(plan)
    args = [arg.decode() for arg in options]
    where = args.index("--seccomp")
    args[where + 1] = "{fd}"
    return [plan.argv[0], *args, "--", *plan.argv[plan.argv.index("--") + 1 :]], bpf


def reap_orphans() -> None:
    """Reap the zombies the raw baseline leaves to this process, outside the timing.

    Once a host has run a command, this process is a child subreaper. bwrap's outer process
    exits without waiting for the namespace's init, which is then re-parented here as a
    zombie. ``Host.run`` reaps its own (they are in its process group); the raw baseline's
    would pile up, and every sweep after them would pay to look at each.
    """
    from stockade_local import reaper

    for pid in reaper.own_children():
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2 :].startswith(b"Z"):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _read_all(fd: int) -> bytes:
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 16, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def bench_bubblewrap(
    runs: int, warmup: int, interleaved: Callable[..., dict[str, Any]]
) -> dict[str, Any]:
    """Host.run confined, raw bwrap with the same flags, and the cost of the stages alone."""
    from stockade_bubblewrap import layout
    from stockade_bubblewrap.provider import BubblewrapSandbox

    from stockade.config.schema import Config
    from stockade.confine import seccomp
    from stockade.host import Host
    from stockade.request.spec import ExecRequest

    probe = BubblewrapSandbox.probe()
    if not probe.usable:
        return {"skipped": f"bubblewrap is not usable here: {probe.detail}"}
    scratch = Path(tempfile.mkdtemp(prefix="stockade-bench-bwrap-"))
    host = Host(Config(sandbox="bubblewrap"))
    try:
        ws = plant_workspace(scratch)
        request = ExecRequest(["true"], str(ws), mode=MODE, origin="cli", sandbox="bubblewrap")
        template, bpf = raw_argv(host, request)
        filter_fd = os.memfd_create("bench-seccomp", 0)
        os.write(filter_fd, bpf)
        argv = [arg.replace("{fd}", str(filter_fd)) for arg in template]

        def via_host() -> int:
            result = host.run(request)
            if result.sandbox.runner_failed:
                return -1
            return result.exit_code if result.exit_code is not None else -1

        def raw_bwrap() -> int:
            os.lseek(filter_fd, 0, os.SEEK_SET)
            return subprocess.run(
                argv,
                pass_fds=(filter_fd,),
                capture_output=True,
                stdin=subprocess.DEVNULL,
                env={},
                check=False,
            ).returncode

        cases = interleaved(
            {"host": via_host, "raw_bwrap": raw_bwrap}, runs, warmup, after=reap_orphans
        )
        os.close(filter_fd)
        stages = _stage_costs(
            host=host, request=request, ws=ws, runs=runs, layout=layout, seccomp=seccomp
        )
    finally:
        host.close()
        shutil.rmtree(scratch, ignore_errors=True)
    host_ms, raw_ms = cases["host"]["median"], cases["raw_bwrap"]["median"]
    return {
        "runs": runs,
        "warmup": warmup,
        "bwrap": argv[0],
        "flags": len(argv) - 3,
        **cases,
        "stages": stages,
        "overhead_ms": host_ms - raw_ms,
        "ratio": host_ms / raw_ms,
        "target_overhead_ms": HOST_TARGET_MS,
    }


def _stage_costs(
    *,
    host: Any,  # noqa: ANN401 - lazy types
    request: Any,  # noqa: ANN401
    ws: Path,
    runs: int,
    layout: Any,  # noqa: ANN401
    seccomp: Any,  # noqa: ANN401
) -> dict[str, float]:
    """Median milliseconds of the pre-spawn stages, each timed alone in this process."""

    def admit() -> None:
        admitted = host.prepare(host.admit(request))
        admitted.provider.release(admitted.plan)

    def build() -> None:
        layout.build(mode=MODE, cwd=str(ws), env={}, host_env=os.environ)

    def program() -> None:
        os.close(seccomp.program_fd(network=False))

    out: dict[str, float] = {}
    for name, call in (("admit", admit), ("layout_build", build), ("seccomp_fd", program)):
        call()
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            call()
            samples.append((time.perf_counter() - start) * 1000)
        out[f"{name}_ms"] = statistics.median(samples)
    return out


def bench_cli_bubblewrap(
    *,
    venv: Path,
    runs: int,
    warmup: int,
    env: dict[str, str],
    cwd: str,
    interleaved: Callable[..., dict[str, Any]],
) -> dict[str, Any]:
    """`stockade run -- true` confined (the default mode) against the peers' CLIs."""
    stockade = str(venv / "bin" / "stockade")
    commands: dict[str, list[str]] = {
        "stockade": [stockade, "run", "--sandbox", "bubblewrap", "--", "true"],
        "python": [str(venv / "bin" / "python"), "-c", "pass"],
    }
    skipped: dict[str, str] = {}
    for peer, (argv, _goal) in PEERS.items():
        found = shutil.which(argv[0])
        if found is None:
            skipped[peer] = f"`{argv[0]}` is not on PATH"
            continue
        probe = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
        if probe.returncode != 0:
            skipped[peer] = f"`{' '.join(argv)}` failed here ({probe.returncode})"
            continue
        commands[peer] = [found, *argv[1:]]
    for name, argv in commands.items():
        proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"bench: {name} failed ({proc.returncode}):\n{proc.stderr}")

    cases = interleaved(
        {name: timed_command(argv, env, cwd) for name, argv in commands.items()}, runs, warmup
    )
    stockade_ms = cases["stockade"]["median"]
    peers = {
        peer: {
            "speedup": cases[peer]["median"] / stockade_ms,
            "goal": goal,
        }
        for peer, (_argv, goal) in PEERS.items()
        if peer in cases
    }
    return {
        "runs": runs,
        "warmup": warmup,
        **cases,
        "ratio_vs_python": stockade_ms / cases["python"]["median"],
        "peers": peers,
        "skipped": skipped,
    }


def bench_landlock(
    runs: int, warmup: int, interleaved: Callable[..., dict[str, Any]]
) -> dict[str, Any]:
    """Host.run under Landlock (workspace-write) against raw ``subprocess.run``."""
    from stockade_landlock.provider import LandlockSandbox

    from stockade.config.schema import Config
    from stockade.host import Host
    from stockade.request.spec import ExecRequest

    probe = LandlockSandbox.probe()
    if not probe.usable:
        return {"skipped": f"Landlock is not usable here: {probe.detail}"}
    scratch = Path(tempfile.mkdtemp(prefix="stockade-bench-landlock-"))
    host = Host(Config(sandbox="landlock"))
    try:
        ws = plant_workspace(scratch)
        request = ExecRequest(["true"], str(ws), mode=MODE, origin="cli", sandbox="landlock")

        def via_host() -> int:
            result = host.run(request)
            return result.exit_code if result.exit_code is not None else -1

        def raw() -> int:
            return subprocess.run(
                ["true"], capture_output=True, stdin=subprocess.DEVNULL, check=False
            ).returncode

        cases = interleaved({"host": via_host, "raw": raw}, runs, warmup)
        admitted = host.prepare(host.admit(request))
        rules = len(admitted.plan.restrict.__self__.rules)  # type: ignore[union-attr]
        admitted.provider.release(admitted.plan)
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            admitted = host.prepare(host.admit(request))
            samples.append((time.perf_counter() - start) * 1000)
            admitted.provider.release(admitted.plan)
    finally:
        host.close()
        shutil.rmtree(scratch, ignore_errors=True)
    host_ms, raw_ms = cases["host"]["median"], cases["raw"]["median"]
    return {
        "runs": runs,
        "warmup": warmup,
        "detail": probe.detail,
        **cases,
        "rules": rules,
        "admit_ms": statistics.median(samples),
        "overhead_ms": host_ms - raw_ms,
        "ratio": host_ms / raw_ms,
        "target_overhead_ms": LANDLOCK_TARGET_MS,
    }
