"""Section 11c of the bench: where a warm call's time goes inside the server.

A server runs on a thread of this process (its own code, a private state and runtime folder)
and this process's main thread is its client (``stockade.cli.client``'s own functions), so
that each stage of the server's call can be timed from inside: the thread's CPU time
(``time.thread_time``, which another process's load barely moves) and the wall time. The
stages are the functions a call passes through (the hello's code check, the warm host, the
host's ``admit``, ``prepare`` and ``carry_out``, the executor's spawn). With ``--profile``,
a cProfile of the server's calls (the thread that runs them, its CPU time) prints its top
functions by own time (``BENCH_SORT=cumulative``, ``BENCH_TOP=N``, ``BENCH_CALLERS=REGEX``
change what it prints); ``--stage MODULE:QUALNAME`` times one more function.

``uv run python bench/server_profile.py [--calls N] [--profile] [--sandbox NAME]``
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import importlib
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

STAGES = (
    ("stockade.server.server", "Server._converse"),
    ("stockade.server.code", "identity"),
    ("stockade.server.calls", "Call.run"),
    ("stockade.cli.common", "make_host"),
    ("stockade.server.warm", "WarmHosts.host"),
    ("stockade.host", "Host.run"),
    ("stockade.host", "Host.admit"),
    ("stockade.host", "Host.prepare"),
    ("stockade.host", "Host.carry_out"),
    ("stockade_local.executor", "LocalExecutor._spawn"),
)
"""The functions timed, outermost first: ``(module, qualified name)``."""

CPU: dict[str, list[float]] = defaultdict(list)
WALL: dict[str, list[float]] = defaultdict(list)


def _timed(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def timed(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 - any function
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            CPU[name].append(time.thread_time() - cpu)
            WALL[name].append(time.perf_counter() - wall)

    return timed


def _instrument(profile: cProfile.Profile | None, stages: list[tuple[str, str]]) -> None:
    for module_name, qualified in stages:
        module = importlib.import_module(module_name)
        owner_name, _, attribute = qualified.rpartition(".")
        owner = getattr(module, owner_name) if owner_name else module
        setattr(owner, attribute, _timed(qualified, getattr(owner, attribute)))
    if profile is None:
        return
    from stockade.server import server

    converse = server.Server._converse

    def profiled(self: Any, conn: Any) -> None:  # noqa: ANN401 - the server's own types
        profile.enable()
        try:
            converse(self, conn)
        finally:
            profile.disable()

    server.Server._converse = profiled  # type: ignore[method-assign]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100, help="calls timed (default 100)")
    parser.add_argument("--sandbox", default="bubblewrap", help="the provider (bubblewrap)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of calls")
    parser.add_argument(
        "--stage",
        action="append",
        default=[],
        metavar="MODULE:QUALNAME",
        help="time this function too (repeatable), e.g. stockade.record.chain:Chain.append_many",
    )
    args = parser.parse_args()
    stages = [*STAGES, *(tuple(s.split(":", 1)) for s in args.stage)]
    root = tempfile.mkdtemp(prefix="stockade-bench-profile-")
    for name in ("state", "runtime", "config", "ws"):
        os.mkdir(os.path.join(root, name), 0o700)
    os.environ.update(
        XDG_STATE_HOME=f"{root}/state",
        XDG_RUNTIME_DIR=f"{root}/runtime",
        XDG_CONFIG_HOME=f"{root}/config",
    )
    os.environ.pop("STOCKADE_CONFIG", None)
    os.chdir(f"{root}/ws")
    # The thread's CPU time, not the wall: on a loaded machine the wall counts other work.
    profile = cProfile.Profile(time.thread_time) if args.profile else None
    _instrument(profile, stages)
    from stockade.cli import client
    from stockade.server import server
    from stockade.server.paths import Place

    warm = server.Server(os.environ, idle=600)
    warm.bind()
    serving = threading.Thread(target=warm.serve_forever, daemon=True)
    serving.start()
    argv = ["run", "--sandbox", args.sandbox, "--", "true"]

    def call() -> float:
        start = time.perf_counter()
        conn = client.connect(Place(os.environ), op="call", start=False)
        try:
            status = client.converse(conn, argv)
        finally:
            conn.close()
        if status != 0:
            raise SystemExit(f"bench: {argv} exited {status}")
        return time.perf_counter() - start

    try:
        for _ in range(5):  # the warm host made, the store opened, the code loaded
            call()
        CPU.clear()
        WALL.clear()
        if profile is not None:
            profile.clear()
        rounds = [call() for _ in range(args.calls)]
    finally:
        warm.stop()
        serving.join()
    print(f"\n11c. A warm call inside the server: {args.calls} calls of {' '.join(argv)}")
    print(f"  client round trip (connect, hello, call): {_ms(rounds)}")
    _report(stages, profile)
    return 0


def _report(stages: list[tuple[str, str]], profile: cProfile.Profile | None) -> None:
    print(f"  {'stage':<28} {'thread cpu ms':>24}   {'wall ms':>24}")
    for _module, name in stages:
        print(f"  {name:<28} {_ms(CPU[name]):>24}   {_ms(WALL[name]):>24}")
    if profile is None:
        return
    stats = pstats.Stats(profile, stream=sys.stdout)
    top = int(os.environ.get("BENCH_TOP", "25"))
    stats.sort_stats(os.environ.get("BENCH_SORT", "tottime")).print_stats(top)
    if os.environ.get("BENCH_CALLERS"):
        stats.print_callers(os.environ["BENCH_CALLERS"])


def _ms(samples: list[float]) -> str:
    if not samples:
        return "-"
    return f"median {statistics.median(samples) * 1e3:6.2f}  min {min(samples) * 1e3:6.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
