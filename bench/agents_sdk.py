"""A section of the bench: a command through the OpenAI Agents SDK's client for Stockade.

    uv run python bench/agents_sdk.py [--runs N]

``session.exec("true", shell=False)`` on a :class:`stockade_agents.StockadeSandboxClient`
session (the SDK's ``SandboxSession`` wrapper around it, as a ``SandboxAgent`` calls it),
interleaved in the same process with the same command through ``Host.run`` and
``Host.run_async``, same configuration, same workspace, same confinement (the sandbox
``auto`` picks). The session runs each step with ``Host.run`` on one worker thread, so its
cost over ``Host.run`` is that hop, the SDK's wrapper and the result's conversion. Target
(issue 38): at most 2 ms over ``Host.run`` (medians).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from typing import Any

import timing  # bench/timing.py

TARGET_MS = 2.0


def bench_agents_sdk(runs: int) -> dict[str, Any]:
    """Interleaved medians of the client's exec and the host's run, in milliseconds."""
    from agents.sandbox import Manifest

    from stockade.host import Host
    from stockade.request.spec import ExecRequest
    from stockade_agents import StockadeSandboxClient

    loop = asyncio.new_event_loop()
    with tempfile.TemporaryDirectory(prefix="stockade-bench-agents-") as scratch:
        host = Host.from_environment()
        client = StockadeSandboxClient(host)
        session = loop.run_until_complete(client.create(manifest=Manifest(root=scratch)))
        loop.run_until_complete(session.start())
        request = ExecRequest(["true"], scratch, workspace=scratch)

        def direct() -> int:
            return host.run(request).exit_code or 0

        def direct_async() -> int:
            return loop.run_until_complete(host.run_async(request)).exit_code or 0

        def through_client() -> int:
            return loop.run_until_complete(session.exec("true", shell=False)).exit_code

        try:
            cases = {"Host.run": direct, "Host.run_async": direct_async, "client": through_client}
            stats = timing.interleaved(cases, runs, warmup=max(10, runs // 10))
            sandbox = host.run(request).sandbox.provider
        finally:
            loop.run_until_complete(session.aclose())
            host.close()
            loop.close()
    return {
        "runs": runs,
        "sandbox": sandbox,
        **stats,
        "overhead_ms": stats["client"]["median"] - stats["Host.run"]["median"],
        "overhead_min_ms": stats["client"]["min"] - stats["Host.run"]["min"],
        "over_async_ms": stats["client"]["median"] - stats["Host.run_async"]["median"],
    }


def report(stats: dict[str, Any]) -> None:
    """Print the section."""
    print(
        f"\nThe Agents SDK client, `true` (sandbox {stats['sandbox']}), interleaved: "
        f"{stats['runs']} runs each"
    )
    print(timing.HEAD)
    print(timing.row('Host.run(ExecRequest(["true"]))', stats["Host.run"]))
    print(timing.row('await Host.run_async(ExecRequest(["true"]))', stats["Host.run_async"]))
    print(timing.row('await session.exec("true") (StockadeSandboxClient)', stats["client"]))
    ok = stats["overhead_ms"] <= TARGET_MS
    print(
        f"  the client adds {stats['overhead_ms']:.3f} ms median over Host.run   "
        f"target <= {TARGET_MS:g} ms: {'met' if ok else 'NOT met'}"
    )
    print(
        f"  (minimums: {stats['overhead_min_ms']:.3f} ms over Host.run; medians: "
        f"{stats['over_async_ms']:.3f} ms over Host.run_async)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stockade-bench-state-") as state:
        os.environ["XDG_STATE_HOME"] = state
        figures = bench_agents_sdk(options.runs)
    report(figures)
    print("BENCH " + json.dumps({"agents_sdk": figures}, sort_keys=True))
