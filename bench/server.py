"""Section 11 of the bench: the warm server (``stockade serve``) and its thin client.

Every case is a whole process started from the user-install venv (``bench/startup.py``),
interleaved by :func:`timing.interleaved`, with a private state folder, runtime folder
(``XDG_RUNTIME_DIR``, so the socket is where a desktop session puts it) and config folder:

- **Warm**: ``stockade run --sandbox bubblewrap -- true`` with the server already running
  (``bin/stockade``: the native client, ``core/native/``; and the same by the Python client,
  ``stockade-py``, beside it),
  against raw ``bwrap`` given the provider's own flags (:func:`confined.raw_argv`),
  ``python -I -c pass`` and ``python -c pass`` (with ``site``, as a console script starts),
  the in-process CLI (``stockade --no-server run ...``), the same pair in
  ``danger-full-access``, and ``codex sandbox -- true`` where Codex installs from the npm
  registry into ``bench/.codex`` (both npm's ``codex`` launcher and the native binary it
  starts). Targets: a median of at most 20 ms, at least 2x faster than Codex's native
  binary.
- **Cold**: the same command with no server running (the server is stopped after every
  sample, outside the timing), so each sample pays the server's start. Target: 350 ms.
- **Phases** of a warm call, timed inside the client process: its imports, connect + hello,
  and the call (the server parses the argv and runs the command on its warm host).
- **Throughput**: 4 clients at once, each running 100 commands of ``true`` one after the
  other, through the server and in-process, for ``danger-full-access`` and bubblewrap.

Every server this section starts is stopped, by its pid file, and the section says so; a
server left by a crash exits by itself after :data:`IDLE_SAFETY` seconds idle.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import codex  # bench/codex.py: Codex from the npm registry
import confined  # bench/confined.py: the raw bwrap flags, the timed command, the reaper
import startup  # bench/startup.py: the user-install venv and the child environment
import timing  # bench/timing.py

WARM_TARGET_MS = 20.0
COLD_TARGET_MS = 350.0
CODEX_TARGET_SPEEDUP = 2.0
"""Against Codex's native binary (the musl build inside ``@openai/codex``), not npm's
node launcher that starts it."""
CLIENTS = 4
COMMANDS = 100
IDLE_SAFETY = "300"
STOP_TIMEOUT = 30.0
CODEX_DIR = codex.CODEX_DIR
SANDBOXED = ["run", "--sandbox", "bubblewrap", "--", "true"]
FULL = ["run", "--mode", "danger-full-access", "--", "true"]

PHASES = """
import time
start = time.perf_counter()
import os, sys
from stockade.cli.client import connect, converse
from stockade.server.paths import Place
imported = time.perf_counter()
conn = connect(Place(os.environ), op="call", start=False)
welcomed = time.perf_counter()
status = converse(conn, sys.argv[1:])
conn.close()
done = time.perf_counter()
ms = [(imported - start) * 1e3, (welcomed - imported) * 1e3, (done - welcomed) * 1e3]
print("PHASES", *ms, status, file=sys.stderr)
"""
"""The thin client's own path (``stockade.cli.entry`` without the in-process fallback),
with a clock between its steps."""


# --- the servers this section starts --------------------------------------------------------


def section_env(root: Path) -> dict[str, str]:
    """The timed commands' environment: private state, runtime and config folders."""
    env = startup.child_env(str(root / "config"))
    for name in ("STOCKADE_NO_SERVER", "STOCKADE_TEST_SERVER", "STOCKADE_RUN"):
        env.pop(name, None)
    for name in ("config", "state", "runtime"):
        (root / name).mkdir(mode=0o700)
    env["XDG_STATE_HOME"] = str(root / "state")
    env["XDG_RUNTIME_DIR"] = str(root / "runtime")
    env["STOCKADE_SERVER_IDLE"] = IDLE_SAFETY
    return env


_PID_FILES: dict[str, str] = {}


def _pid_file(env: dict[str, str]) -> str:
    """The pid file of the section's server, as the user-install venv's code names it (the
    name carries a digest of the installation: this process's own venv has another)."""
    key = env["XDG_STATE_HOME"]
    if key not in _PID_FILES:
        python = str(startup.USER_VENV / "bin" / "python")
        script = "import os; from stockade.server.paths import Place; print(Place(os.environ).pid)"
        found = subprocess.run(
            [python, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        _PID_FILES[key] = found.stdout.strip()
    return _PID_FILES[key]


def server_pid(env: dict[str, str]) -> int | None:
    """The pid in the section's server pid file, if one is there."""
    try:
        return int(Path(_pid_file(env)).read_text().strip())
    except (OSError, ValueError):
        return None


def stop_server(env: dict[str, str]) -> int | None:
    """Stop the section's server, if one runs, and wait until its process is gone; its pid.

    Raises:
        SystemExit: it was still there after :data:`STOP_TIMEOUT` seconds and a SIGKILL.
    """
    pid = server_pid(env)
    if pid is None:
        return None
    stockade = str(startup.USER_VENV / "bin" / "stockade")
    subprocess.run(
        [stockade, "serve", "--stop"], env=env, capture_output=True, check=False, timeout=60
    )
    if not _gone(pid, STOP_TIMEOUT):
        if b"stockade.server" in _cmdline(pid):  # the pid file's server, not a reused pid
            os.kill(pid, signal.SIGKILL)
        if not _gone(pid, STOP_TIMEOUT):
            raise SystemExit(f"bench: the server (pid {pid}) did not stop")
    return pid


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _gone(pid: int, timeout: float) -> bool:
    """Wait until ``pid`` has exited (reaping it when this process inherited it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            return True
        if stat[stat.rfind(b")") + 2 :].startswith(b"Z"):
            return True  # exited; its parent (not this process) reaps it
        time.sleep(0.002)
    return False


# --- the measurements -----------------------------------------------------------------------


def _raw_bwrap(ws: Path) -> tuple[Callable[[], int], Callable[[], None]]:
    """Raw bwrap with the provider's flags for ``true`` in ``ws``, and how to close it."""
    from stockade.config.schema import Config
    from stockade.host import Host
    from stockade.request.spec import ExecRequest

    host = Host(Config(sandbox="bubblewrap"))
    try:
        request = ExecRequest(
            ["true"], str(ws), mode=confined.MODE, origin="cli", sandbox="bubblewrap"
        )
        template, bpf = confined.raw_argv(host, request)
    finally:
        host.close()
    filter_fd = os.memfd_create("bench-seccomp", 0)
    os.write(filter_fd, bpf)
    argv = [arg.replace("{fd}", str(filter_fd)) for arg in template]

    def call() -> int:
        os.lseek(filter_fd, 0, os.SEEK_SET)
        return subprocess.run(
            argv,
            pass_fds=(filter_fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={},
            check=False,
        ).returncode

    return call, lambda: os.close(filter_fd)


def _phases(python: str, env: dict[str, str], cwd: str, runs: int) -> dict[str, float]:
    """Median milliseconds of the warm client's steps, each run a process of its own."""
    samples: dict[str, list[float]] = {"imports_ms": [], "connect_ms": [], "call_ms": []}
    for _ in range(runs):
        proc = subprocess.run(
            [python, "-c", PHASES, *SANDBOXED],
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        line = next((x for x in proc.stderr.splitlines() if x.startswith("PHASES ")), "")
        fields = line.split()
        if len(fields) != 5 or fields[4] != "0":
            raise SystemExit(f"bench: the client's phases failed:\n{proc.stderr}")
        for name, value in zip(samples, fields[1:4], strict=True):
            samples[name].append(float(value))
    return {name: statistics.median(values) for name, values in samples.items()}


def _throughput(argv: list[str], env: dict[str, str], cwd: str, commands: int) -> float:
    """Commands per second: :data:`CLIENTS` threads, each running ``commands`` processes of
    ``argv`` one after another, all at once."""
    failures: list[int] = []
    said: list[str] = []

    def client() -> None:
        for _ in range(commands):
            done = subprocess.run(
                argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                failures.append(done.returncode)
                said.append(done.stderr.decode(errors="replace").strip())

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"bench: {len(failures)} of {argv} failed: {said[0]!r} ({failures})")
    return CLIENTS * commands / elapsed


def bench_server(*, venv: Path, runs: int, warmup: int, commands: int) -> dict[str, Any]:
    """Every figure of the section (``commands``: per client in the throughput part)."""
    from stockade_bubblewrap.provider import BubblewrapSandbox

    probe = BubblewrapSandbox.probe()
    if not probe.usable:
        return {"skipped": f"bubblewrap is not usable here: {probe.detail}"}
    root = Path(tempfile.mkdtemp(prefix="stockade-bench-server-"))
    env = section_env(root)
    ws = confined.plant_workspace(root)
    close_raw: Callable[[], None] = lambda: None  # noqa: E731 - replaced once it exists
    try:
        codex_env = dict(env, CODEX_HOME=str(CODEX_DIR / "home"))
        codex_cmds, codex_info = codex.codex_commands(codex_env, str(ws))
        raw, close_raw = _raw_bwrap(ws)
        peers = {"raw_bwrap": raw}
        for name, argv in codex_cmds.items():
            peers[name] = confined.timed_command(argv, codex_env, str(ws))
        out = _measure(venv, env, str(ws), peers, runs=runs, warmup=warmup, commands=commands)
    finally:
        close_raw()
        stop_server(env)
        pid = server_pid(env)
        left = pid is not None and b"stockade.server" in _cmdline(pid)
        shutil.rmtree(root, ignore_errors=True)
    return {**out, "codex": codex_info, "left_running": left}


def _measure(
    venv: Path,
    env: dict[str, str],
    cwd: str,
    peers: dict[str, Callable[[], int]],
    *,
    runs: int,
    warmup: int,
    commands: int,
) -> dict[str, Any]:
    stockade, python = str(venv / "bin" / "stockade"), str(venv / "bin" / "python")
    python_client = str(venv / "bin" / "stockade-py")

    def cmd(*argv: str) -> Callable[[], int]:
        return confined.timed_command([stockade, *argv], env, cwd)

    # Warm: the first call starts the server; the warm-up calls find it running.
    cases: dict[str, Callable[[], int]] = {
        "warm": cmd(*SANDBOXED),
        "warm_python_client": confined.timed_command([python_client, *SANDBOXED], env, cwd),
        "in_process": cmd("--no-server", *SANDBOXED),
        "warm_full": cmd(*FULL),
        "in_process_full": cmd("--no-server", *FULL),
        "python": confined.timed_command([python, "-I", "-c", "pass"], env, cwd),
        # The console script's interpreter is not isolated: it also pays for ``site``.
        "python_site": confined.timed_command([python, "-c", "pass"], env, cwd),
        **peers,
    }
    stop_server(env)
    warm = timing.interleaved(cases, runs, warmup, after=confined.reap_orphans)
    pid = server_pid(env)
    phases = _phases(python, env, cwd, runs)
    if server_pid(env) != pid:
        raise SystemExit("bench: the server was replaced during the warm runs")

    # Cold: no server before any sample (the warm-up, too, is followed by a stop).
    cold_cases = {"cold": cmd(*SANDBOXED), "in_process": cmd("--no-server", *SANDBOXED)}

    def stop() -> None:
        stop_server(env)

    for _ in range(warmup):
        for name, case in cold_cases.items():
            if (status := case()) != 0:
                raise SystemExit(f"bench: {name} exited with status {status}")
            stop()
    cold = timing.interleaved(cold_cases, runs, 0, after=stop)

    # Throughput: the server warm before its first batch; ABBA across the two modes.
    cmd(*FULL)()
    throughput: dict[str, dict[str, float]] = {}
    for label, argv, order in (
        ("danger-full-access", FULL, ("server", "in_process")),
        ("bubblewrap", SANDBOXED, ("in_process", "server")),
    ):
        figures = {}
        for how in order:
            full = [stockade, *argv] if how == "server" else [stockade, "--no-server", *argv]
            figures[how] = _throughput(full, env, cwd, commands)
        figures["ratio"] = figures["server"] / figures["in_process"]
        throughput[label] = figures

    medians = {name: stats["median"] for name, stats in warm.items()}
    phases["python_ms"] = medians["python"]
    phases["site_ms"] = medians["python_site"] - medians["python"]
    phases["rest_ms"] = medians["warm_python_client"] - sum(phases.values())
    ratios = {
        "warm_vs_in_process": medians["warm"] / medians["in_process"],
        "warm_full_vs_in_process_full": medians["warm_full"] / medians["in_process_full"],
        "warm_vs_python": medians["warm"] / medians["python"],
        "python_client_vs_native": medians["warm_python_client"] / medians["warm"],
        "warm_minus_raw_bwrap_ms": medians["warm"] - medians["raw_bwrap"],
        "cold_vs_in_process": cold["cold"]["median"] / cold["in_process"]["median"],
    }
    speedups = {name: medians[name] / medians["warm"] for name in peers if "codex" in name}
    if "codex_native" in medians:
        speedups["codex_native_vs_python_client"] = (
            medians["codex_native"] / medians["warm_python_client"]
        )
    phases["server_over_raw_bwrap_ms"] = phases["call_ms"] - medians["raw_bwrap"]
    return {
        "runs": runs,
        "warmup": warmup,
        "clients": CLIENTS,
        "commands_per_client": commands,
        "warm": warm,
        "cold": cold,
        "phases": phases,
        "throughput": throughput,
        "ratios": ratios,
        "codex_speedup": speedups,
        "targets": {
            "warm_ms": WARM_TARGET_MS,
            "cold_ms": COLD_TARGET_MS,
            "codex_speedup": CODEX_TARGET_SPEEDUP,
        },
    }


# --- output ---------------------------------------------------------------------------------


def report_server(
    stats: dict[str, Any], row: Callable[[str, dict[str, float]], str], head: str
) -> None:
    """Print the section (``row`` and ``head`` are bench/timing.py's)."""
    if "skipped" in stats:
        print(f"\n11. The warm server: skipped, {stats['skipped']}")
        return

    def verdict(ok: bool) -> str:  # noqa: FBT001 - a plain predicate
        return "met" if ok else "NOT met"

    warm, cold = stats["warm"], stats["cold"]
    print(
        f"\n11. The warm server, whole processes from the user-install venv, "
        f"timing.interleaved: {stats['runs']} runs each after {stats['warmup']} warm-up"
    )
    print(head)
    labels = {
        "warm": "stockade run --sandbox bubblewrap -- true (server warm, native client)",
        "warm_python_client": "the same by the Python client (stockade-py)",
        "in_process": "stockade --no-server run --sandbox bubblewrap -- true",
        "warm_full": "stockade run --mode danger-full-access -- true (warm)",
        "in_process_full": "stockade --no-server run --mode danger-full-access -- true",
        "raw_bwrap": "raw bwrap, the provider's flags, --seccomp FD",
        "python": "python -I -c pass",
        "python_site": "python -c pass (with site, as the console script starts)",
        "codex": "codex sandbox -- true (npm's launcher)",
        "codex_native": "codex sandbox -- true (its native binary)",
    }
    for name, label in labels.items():
        if name in warm:
            print(row(label, warm[name]))
    ratios, targets = stats["ratios"], stats["targets"]
    ms = warm["warm"]["median"]
    print(
        f"  warm median {ms:.1f} ms   target <= {targets['warm_ms']:g} ms: "
        f"{verdict(ms <= targets['warm_ms'])}"
    )
    print(
        f"  server / in-process: {ratios['warm_vs_in_process']:.2f}x (bubblewrap), "
        f"{ratios['warm_full_vs_in_process_full']:.2f}x (danger-full-access); "
        f"{ratios['warm_vs_python']:.2f}x python -I -c pass; the Python client "
        f"{ratios['python_client_vs_native']:.2f}x the native one; "
        f"{ratios['warm_minus_raw_bwrap_ms']:+.1f} ms over raw bwrap"
    )
    codex = stats["codex"]
    for name, speedup in stats["codex_speedup"].items():
        goal = (
            f"   target >= {targets['codex_speedup']:g}x: "
            f"{verdict(speedup >= targets['codex_speedup'])}"
            if name == "codex_native"
            else ""
        )
        whom = "the Python client" if name.endswith("_python_client") else "stockade warm"
        print(f"  {name.removesuffix('_vs_python_client')} / {whom}: {speedup:.2f}x{goal}")
    if codex.get("version"):
        print(f"  codex version: {codex['version']}")
    for name, why in codex.get("skipped_cases", {}).items():
        print(f"  {name}: skipped, {why}")
    if "skipped" in codex:
        print(f"  codex: skipped, {codex['skipped']}")
    phases = stats["phases"]
    print(
        "  the Python client's warm call, inside it (medians): "
        f"interpreter (python -I -c pass) {phases['python_ms']:.1f} ms, site "
        f"{phases['site_ms']:.1f} ms, client imports "
        f"{phases['imports_ms']:.1f} ms, connect + hello {phases['connect_ms']:.1f} ms, "
        f"the call on the server {phases['call_ms']:.1f} ms (of which raw bwrap "
        f"{warm['raw_bwrap']['median']:.1f} ms, the server's share "
        f"{phases['server_over_raw_bwrap_ms']:.1f} ms), the client after the call and the "
        f"rest (by difference) {phases['rest_ms']:.1f} ms"
    )
    print("\n    Cold: no server running before each sample (stopped outside the timing)")
    print(head)
    print(row("stockade run --sandbox bubblewrap -- true (starts the server)", cold["cold"]))
    print(row("stockade --no-server run --sandbox bubblewrap -- true", cold["in_process"]))
    ms = cold["cold"]["median"]
    print(
        f"  cold median {ms:.1f} ms ({ratios['cold_vs_in_process']:.2f}x in-process)   "
        f"target <= {targets['cold_ms']:g} ms: {verdict(ms <= targets['cold_ms'])}"
    )
    print(
        f"\n    Throughput: {stats['clients']} clients at once x "
        f"{stats['commands_per_client']} commands of `true` each"
    )
    for mode, figures in stats["throughput"].items():
        print(
            f"  {mode:<20} server {figures['server']:7.1f}/s   in-process "
            f"{figures['in_process']:7.1f}/s   ({figures['ratio']:.2f}x)"
        )
    print(f"  a server left running: {'YES' if stats['left_running'] else 'no'}")


def main() -> int:
    """This section alone: ``uv run python bench/server.py [--runs N] [--quick]``."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None, help="runs per case (default 40)")
    parser.add_argument("--quick", action="store_true", help="10 runs, 4 x 20 commands")
    args = parser.parse_args()
    runs = args.runs if args.runs is not None else (10 if args.quick else 40)
    venv, _rebuilt, _seconds = startup.ensure_user_venv()
    with tempfile.TemporaryDirectory(prefix="stockade-bench-state-") as state:
        os.environ["XDG_STATE_HOME"] = state  # the raw bwrap flags' host records there
        stats = bench_server(
            venv=venv,
            runs=runs,
            warmup=2 if args.quick else 5,
            commands=20 if args.quick else COMMANDS,
        )
    report_server(stats, timing.row, timing.HEAD)
    print("\nBENCH " + json.dumps({"server": stats}, sort_keys=True, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
