"""Stockade's overhead benchmark: the library path and the CLI start-up, in one run.

    uv run python bench/run.py [--runs N] [--quick]

1. Library: ``Host.run(ExecRequest(["true"], ...))`` against raw ``subprocess.run(["true"])``
   (and its capturing variant) in this process, timing.interleaved, after warm-up.
2. CLI: ``stockade run --mode danger-full-access -- true`` against ``python -c pass``, both
   from a separate venv installed the way a user gets it (non-editable, bytecode compiled),
   in-process (``STOCKADE_NO_SERVER=1``, in sections 2 to 4; section 11 times the server).
3. Start-up breakdown: the top cumulative ``-X importtime`` costs of the CLI's imports.
4. Bubblewrap: ``Host.run`` confined (``workspace-write``) against raw ``bwrap`` with the very
   flags the provider builds, the pre-spawn stages alone, and the CLI under bubblewrap
   against the peers' CLIs (``codex sandbox``, ``srt``) where they are installed.
5. Landlock: ``Host.run`` confined by Landlock against raw capturing ``subprocess.run``.
6. The record: ``Host.run`` with the built-in recorder against the same host with it
   blocked, and ``verify`` over 1,000 recorded commands.
7. Egress: one 256 MiB download direct and through the egress proxy (CONNECT).
8. Changes: ``Watch(root)`` + ``finish()`` on a 10,000-file tree where 3 files change, against
   one Python ``lstat`` walk, one ``os.scandir`` walk and ``find -printf`` of the same tree.
9. MCP: ``run_command`` of ``true`` through ``stockade mcp`` (the SDK's client over stdio)
   against ``Host.run`` of the same request in this process.
10. The run page: ``GET /runs/RUN`` of a 1,000-step run, server side, against ``verify``
    alone and raw ``record.rows`` + ``json.dumps`` of the same events.
11. The warm server: ``stockade run`` through a running server, cold (starting it) and
    in-process, against raw ``bwrap``, ``python -I -c pass`` and ``codex sandbox -- true``;
    where a warm call's time goes; 4 clients x 100 commands at once (``bench/server.py``).
    11b: what the server's kept watch costs a call in a 10,000-file folder, beside the
    in-process CLI's per-call watch (``bench/server_watch.py``).

Every section runs with a private ``XDG_STATE_HOME``: the record it writes is thrown away.

Prints a table, then one ``BENCH {...}`` JSON line with every figure. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any, Final

import changes  # bench/changes.py
import confined  # bench/confined.py: this script's directory is first on sys.path
import egress  # bench/egress.py
import mcp_server  # bench/mcp_server.py (not mcp.py: that would shadow the SDK)
import record  # bench/record.py
import server  # bench/server.py: section 11, the warm server and its thin client
import server_watch  # bench/server_watch.py: section 11b, the server's kept watch
import startup  # bench/startup.py: sections 2 and 3, the CLI
import timing  # bench/timing.py: interleaving and table rows
import ui_page  # bench/ui_page.py

LIB_TARGET_MS = 0.5  # Host.run may add at most this much to the median
MODE: Final = startup.MODE


# --- 1. library ------------------------------------------------------------------------------


def bench_library(runs: int, warmup: int) -> dict[str, Any]:
    """Host.run against raw subprocess.run in this process."""
    from stockade.host import Host
    from stockade.request.spec import ExecRequest

    host = Host()
    try:

        def via_host() -> int:
            result = host.run(ExecRequest(["true"], mode=MODE, origin="cli"))
            return result.exit_code if result.exit_code is not None else -1

        def raw() -> int:
            return subprocess.run(["true"], check=False).returncode

        def raw_capture() -> int:
            return subprocess.run(
                ["true"], capture_output=True, stdin=subprocess.DEVNULL, check=False
            ).returncode

        cases = timing.interleaved(
            {"host": via_host, "raw": raw, "raw_capture": raw_capture}, runs, warmup
        )
    finally:
        host.close()
    host_ms = cases["host"]["median"]
    return {
        "runs": runs,
        "warmup": warmup,
        **cases,
        "overhead_ms": host_ms - cases["raw"]["median"],
        "ratio": host_ms / cases["raw"]["median"],
        "overhead_vs_capture_ms": host_ms - cases["raw_capture"]["median"],
        "ratio_vs_capture": host_ms / cases["raw_capture"]["median"],
        "target_overhead_ms": LIB_TARGET_MS,
    }


# --- output ----------------------------------------------------------------------------------


def _verdict(ok: bool) -> str:  # noqa: FBT001 - a plain predicate
    return "met" if ok else "NOT met"


def report(
    *,
    meta: dict[str, Any],
    lib: dict[str, Any],
    cli: dict[str, Any],
    imports: dict[str, Any],
    bwrap: dict[str, Any],
    bwrap_cli: dict[str, Any],
    landlock: dict[str, Any],
    recording: dict[str, Any],
    egress_stats: dict[str, Any],
    changes_stats: dict[str, Any],
    mcp_stats: dict[str, Any],
    ui_stats: dict[str, Any],
    server_stats: dict[str, Any],
) -> None:
    """Print the table, then the BENCH JSON line."""
    head = timing.HEAD
    print(
        f"Stockade bench  {meta['commit']}{' (dirty)' if meta['dirty'] else ''}  "
        f"Python {meta['python']}  {meta['platform']}  {meta['cpus']} CPUs"
    )
    print(
        f"\n1. Library, one process, timing.interleaved: {lib['runs']} runs each "
        f"after {lib['warmup']} warm-up"
    )
    print(head)
    print(timing.row(f'Host.run(ExecRequest(["true"], mode="{MODE}"))', lib["host"]))
    print(timing.row('subprocess.run(["true"])', lib["raw"]))
    print(
        timing.row(
            'subprocess.run(["true"], capture_output=True, stdin=DEVNULL)', lib["raw_capture"]
        )
    )
    print(
        f"  overhead vs plain:   {lib['overhead_ms']:+.3f} ms  ({lib['ratio']:.2f}x)   "
        f"target +{LIB_TARGET_MS} ms median: {_verdict(lib['overhead_ms'] <= LIB_TARGET_MS)}"
    )
    print(
        f"  overhead vs capture: {lib['overhead_vs_capture_ms']:+.3f} ms  "
        f"({lib['ratio_vs_capture']:.2f}x)"
    )
    print(
        f"\n2. CLI, user-install venv ({meta['venv']}), timing.interleaved: "
        f"{cli['runs']} runs each after {cli['warmup']} warm-up"
    )
    print(head)
    print(timing.row(f"stockade run --mode {MODE} -- true (in-process)", cli["stockade"]))
    print(timing.row("python -c pass", cli["python"]))
    print(timing.row(f'python -c "{startup.FLOOR_IMPORTS}"', cli["floor"]))
    print(
        f"  ratio: {cli['ratio']:.2f}x  ({cli['overhead_ms']:+.3f} ms)   "
        f"target <= {startup.CLI_TARGET_RATIO:g}x: "
        f"{_verdict(cli['ratio'] <= startup.CLI_TARGET_RATIO)}"
    )
    print(f"  dependency floor alone: {cli['floor_ratio']:.2f}x python -c pass")
    print(f'\n3. Start-up: python -X importtime -c "{startup.IMPORTS}"')
    print(
        f"  all imports (top level): {imports['total_ms']:.1f} ms; "
        f"top {startup.TOP_IMPORTS} by cumulative:"
    )
    print(f"  {'cumulative ms':>13} {'self ms':>8}  module")
    for row in imports["top"]:
        indent = "  " * row["depth"]
        print(f"  {row['cumulative_ms']:>13.2f} {row['self_ms']:>8.2f}  {indent}{row['module']}")
    packages = ", ".join(f"{name} {ms:.1f}" for name, ms in imports["self_by_package_ms"].items())
    print(f"  self ms by top-level package: {packages}")
    report_bubblewrap(bwrap, bwrap_cli, head)
    report_landlock(landlock, head)
    report_record(recording, head)
    egress.report_egress(egress_stats, timing.row, head)
    changes.report_changes(changes_stats, timing.row, head)
    mcp_server.report_mcp(mcp_stats, timing.row, head)
    ui_page.report_ui_page(ui_stats, timing.row, head)
    server.report_server(server_stats, timing.row, head)
    server_watch.report_server_watch(server_stats["watch"])
    payload = {
        "server": server_stats,
        "ui_page": ui_stats,
        "changes": changes_stats,
        "mcp": mcp_stats,
        "egress": egress_stats,
        "record": recording,
        "landlock": landlock,
        "meta": meta,
        "library": lib,
        "cli": cli,
        "imports": imports,
        "bubblewrap": bwrap,
        "bubblewrap_cli": bwrap_cli,
    }
    print("\nBENCH " + json.dumps(payload, sort_keys=True, separators=(",", ":")))


def report_bubblewrap(bwrap: dict[str, Any], cli: dict[str, Any], head: str) -> None:
    """Print section 4."""
    if "skipped" in bwrap:
        print(f"\n4. Bubblewrap: skipped, {bwrap['skipped']}")
        return
    print(
        f"\n4. Bubblewrap ({bwrap['bwrap']}, {bwrap['flags']} flags), timing.interleaved: "
        f"{bwrap['runs']} runs each after {bwrap['warmup']} warm-up"
    )
    print(head)
    print(timing.row(f'Host.run(ExecRequest(["true"], mode="{confined.MODE}"))', bwrap["host"]))
    print(
        timing.row(
            "raw bwrap, the same flags on its command line, --seccomp FD", bwrap["raw_bwrap"]
        )
    )
    ok = bwrap["overhead_ms"] <= confined.HOST_TARGET_MS
    print(
        f"  overhead: {bwrap['overhead_ms']:+.3f} ms  ({bwrap['ratio']:.2f}x)   "
        f"target +{confined.HOST_TARGET_MS} ms median: {_verdict(ok)}"
    )
    stages = bwrap["stages"]
    print(
        f"  stages alone (median): host.admit {stages['admit_ms']:.3f} ms, of which "
        f"layout.build {stages['layout_build_ms']:.3f} ms and seccomp fd "
        f"{stages['seccomp_fd_ms']:.3f} ms"
    )
    print(f"\n   CLI under bubblewrap: {cli['runs']} runs each after {cli['warmup']} warm-up")
    print(head)
    print(timing.row("stockade run --sandbox bubblewrap -- true (in-process)", cli["stockade"]))
    print(timing.row("python -c pass", cli["python"]))
    for peer, (argv, _goal) in confined.PEERS.items():
        if peer in cli:
            print(timing.row(" ".join(argv), cli[peer]))
    print(f"  ratio vs python -c pass: {cli['ratio_vs_python']:.2f}x")
    for peer, figures in cli["peers"].items():
        ok = figures["speedup"] >= figures["goal"]
        print(
            f"  {peer}: stockade is {figures['speedup']:.2f}x faster   "
            f"target >= {figures['goal']:g}x: {_verdict(ok)}"
        )
    for peer, why in cli["skipped"].items():
        print(f"  {peer}: skipped, {why}")


def report_landlock(landlock: dict[str, Any], head: str) -> None:
    """Print section 5."""
    if "skipped" in landlock:
        print(f"\n5. Landlock: skipped, {landlock['skipped']}")
        return
    print(
        f"\n5. Landlock ({landlock['detail']}, {landlock['rules']} rules), timing.interleaved: "
        f"{landlock['runs']} runs each after {landlock['warmup']} warm-up"
    )
    print(head)
    print(timing.row(f'Host.run(ExecRequest(["true"], mode="{confined.MODE}"))', landlock["host"]))
    print(
        timing.row('subprocess.run(["true"], capture_output=True, stdin=DEVNULL)', landlock["raw"])
    )
    ok = landlock["overhead_ms"] <= confined.LANDLOCK_TARGET_MS
    print(
        f"  overhead: {landlock['overhead_ms']:+.3f} ms  ({landlock['ratio']:.2f}x)   "
        f"target +{confined.LANDLOCK_TARGET_MS} ms median: {_verdict(ok)}"
    )
    print(f"  host.admit alone (median): {landlock['admit_ms']:.3f} ms")


def report_record(recording: dict[str, Any], head: str) -> None:
    """Print section 6."""
    print(
        f"\n6. The record, timing.interleaved: {recording['runs']} runs each "
        f"after {recording['warmup']} warm-up"
    )
    print(head)
    print(timing.row(f'Host.run(["true"], mode="{MODE}"), recorded', recording["recorded"]))
    print(timing.row("the same, with the recorder blocked", recording["unrecorded"]))
    ok = recording["overhead_ms"] <= record.RECORD_TARGET_MS
    print(
        f"  recording adds: {recording['overhead_ms']:+.3f} ms median   "
        f"target +{record.RECORD_TARGET_MS:g} ms: {_verdict(ok)}"
    )
    ok = recording["verify_s"] < record.VERIFY_TARGET_S
    print(
        f"  verify {recording['verify_commands']} commands ({recording['verify_events']} "
        f"events): {recording['verify_s'] * 1000:.0f} ms   "
        f"target < {record.VERIFY_TARGET_S:g} s: {_verdict(ok)}"
    )


def git_state() -> tuple[str, bool]:
    """The short commit and whether the measured sources differ from it."""

    def git(*args: str) -> str:
        proc = subprocess.run(
            ["git", *args], cwd=startup.ROOT, capture_output=True, text=True, check=False
        )
        return proc.stdout.strip()

    return git("rev-parse", "--short", "HEAD") or "unknown", bool(
        git("status", "--porcelain", "--", *startup.PACKAGES, "bench")
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run every section and print the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs",
        type=int,
        default=None,
        help="CLI runs per command (default 40); the library does 5x as many",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a fast smoke run: 10 runs (library 50), little warm-up",
    )
    args = parser.parse_args(argv)
    runs = args.runs if args.runs is not None else (10 if args.quick else 40)
    if runs < 2:
        parser.error("--runs must be at least 2")
    warmup = 2 if args.quick else 5

    commit, dirty = git_state()
    state = tempfile.TemporaryDirectory(prefix="stockade-bench-state-")
    os.environ["XDG_STATE_HOME"] = state.name  # every host and child records there
    lib = bench_library(runs * 5, warmup * 4)
    venv, rebuilt, build_s = startup.ensure_user_venv()
    with tempfile.TemporaryDirectory(prefix="stockade-bench-") as scratch:
        env = startup.child_env(scratch)
        # Sections 2-4 time the in-process CLI, as before the warm server (section 11 times
        # the server, and a server started here would outlive the bench).
        env["STOCKADE_NO_SERVER"] = "1"
        cli = startup.bench_cli(venv, runs, warmup, env, scratch)
        imports = startup.import_breakdown(venv, env, scratch)
        bwrap_cli = confined.bench_cli_bubblewrap(
            venv=venv,
            runs=runs,
            warmup=warmup,
            env=env,
            cwd=scratch,
            interleaved=timing.interleaved,
        )
    bwrap = confined.bench_bubblewrap(runs * 5, warmup * 4, timing.interleaved)
    landlock = confined.bench_landlock(runs * 5, warmup * 4, timing.interleaved)
    recording = record.bench_record(runs * 5, warmup * 4, timing.interleaved)
    egress_stats = egress.bench_egress(timing.interleaved, runs=3 if args.quick else 5)
    changes_stats = changes.bench_changes(timing.interleaved, runs=20 if args.quick else 40)
    mcp_stats = mcp_server.bench_mcp(runs * 5, warmup * 4, timing.interleaved)
    ui_stats = ui_page.bench_ui_page(
        timing.interleaved, runs=10 if args.quick else 30, warmup=warmup
    )
    server_stats = server.bench_server(
        venv=venv, runs=runs, warmup=warmup, commands=20 if args.quick else server.COMMANDS
    )
    server_stats["watch"] = server_watch.bench_server_watch(
        venv=venv, runs=runs, warmup=warmup, inner=5 * runs
    )
    state.cleanup()
    meta = {
        "commit": commit,
        "dirty": dirty,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
        "venv": str(venv.relative_to(startup.ROOT))
        + (f", rebuilt in {build_s:.1f} s" if rebuilt else ", cached"),
        "quick": bool(args.quick),
    }
    report(
        meta=meta,
        lib=lib,
        cli=cli,
        imports=imports,
        bwrap=bwrap,
        bwrap_cli=bwrap_cli,
        landlock=landlock,
        recording=recording,
        egress_stats=egress_stats,
        changes_stats=changes_stats,
        mcp_stats=mcp_stats,
        ui_stats=ui_stats,
        server_stats=server_stats,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
