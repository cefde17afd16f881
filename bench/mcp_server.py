"""Section 9 of the bench: ``run_command`` through ``stockade mcp`` (``bench/run.py``).

Not ``bench/mcp.py``: this directory is first on ``sys.path``, and a module of that name
would shadow the ``mcp`` SDK it drives.

One ``stockade mcp`` server is started as a child process and kept for the whole section;
the SDK's own client (``stdio_client`` + ``ClientSession``) calls ``run_command`` with
``["true"]`` on it, from an event loop on a thread of its own, so that each call is one
plain timed function like the other sections'. Interleaved with it in the same run:
``Host.run(ExecRequest(["true"]))`` in this process with the same configuration (the
default mode, confined by the sandbox ``auto`` picks), which is what the server runs for
each call. Both pay the sandbox; the difference is the protocol: JSON-RPC over two pipes,
the SDK's validation on both sides, the result rendered as data and text. The target: the
median through MCP at most 2x the direct one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

import timing  # bench/timing.py

MCP_TARGET_RATIO = 2.0


class _Client:
    """An MCP session with ``stockade mcp``, served by an event loop on its own thread."""

    def __init__(self, cwd: str) -> None:
        self.cwd = cwd
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[Any] = self.loop.create_future()
        self._task = asyncio.run_coroutine_threadsafe(self._hold(), self.loop)
        self.session = asyncio.run_coroutine_threadsafe(self._wait_ready(), self.loop).result(60)

    async def _wait_ready(self) -> Any:  # noqa: ANN401 - an mcp.ClientSession
        return await self._ready

    async def _hold(self) -> None:
        from mcp import ClientSession, StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=sys.executable,
            args=["-c", "from stockade.cli import entry; entry()", "mcp"],
            env={"XDG_STATE_HOME": os.environ.get("XDG_STATE_HOME", "")},
            cwd=self.cwd,
        )
        try:
            async with (
                stdio_client(params) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                self._ready.set_result(session)
                await self._stop.wait()
        except BaseException as error:
            if not self._ready.done():
                self._ready.set_exception(error)
            raise

    def call(self) -> int:
        """``run_command ["true"]``: the command's exit status (-1 for a tool error)."""
        future = asyncio.run_coroutine_threadsafe(
            self.session.call_tool("run_command", {"argv": ["true"]}), self.loop
        )
        result = future.result(60)
        if result.is_error:
            return -1
        code = result.structured_content["exit_code"]
        return code if isinstance(code, int) else -1

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        with contextlib.suppress(Exception):
            self._task.result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def bench_mcp(runs: int, warmup: int, interleaved: timing.Interleave) -> dict[str, Any]:
    """``run_command`` through the server against ``Host.run`` in this process."""
    from stockade.host import Host
    from stockade.request.spec import ExecRequest

    with tempfile.TemporaryDirectory(prefix="stockade-bench-mcp-") as scratch:
        host = Host.from_environment()
        client = _Client(scratch)
        request = ExecRequest(["true"], scratch, origin="mcp")

        def direct() -> int:
            code = host.run(request).exit_code
            return code if code is not None else -1

        try:
            cases = interleaved({"direct": direct, "mcp": client.call}, runs, warmup)
            sandbox = host.run(request).sandbox.provider
        finally:
            client.close()
            host.close()
    ratio = cases["mcp"]["median"] / cases["direct"]["median"]
    return {
        "direct": cases["direct"],
        "mcp": cases["mcp"],
        "ratio": ratio,
        "overhead_ms": cases["mcp"]["median"] - cases["direct"]["median"],
        "sandbox": sandbox,
        "runs": runs,
        "warmup": warmup,
    }


def report_mcp(
    stats: dict[str, Any], row: Callable[[str, dict[str, float]], str], head: str
) -> None:
    """Print the section (``row`` and ``head`` are bench/run.py's ``_row`` and header)."""
    print(
        f"\n9. MCP server, `run_command` of `true` (sandbox {stats['sandbox']}), interleaved: "
        f"{stats['runs']} runs each after {stats['warmup']} warm-up"
    )
    print(head)
    print(row('Host.run(ExecRequest(["true"])) in this process', stats["direct"]))
    print(row('run_command {"argv": ["true"]} through `stockade mcp`', stats["mcp"]))
    ok = stats["ratio"] <= MCP_TARGET_RATIO
    print(
        f"  MCP adds {stats['overhead_ms']:.3f} ms median ({stats['ratio']:.2f}x)   "
        f"target <= {MCP_TARGET_RATIO:g}x: {'met' if ok else 'NOT met'}"
    )


if __name__ == "__main__":
    import json

    with tempfile.TemporaryDirectory(prefix="stockade-bench-state-") as state:
        os.environ["XDG_STATE_HOME"] = state
        figures = bench_mcp(200, 20, timing.interleaved)
    report_mcp(figures, timing.row, timing.HEAD)
    print("BENCH " + json.dumps({"mcp": figures}, sort_keys=True))
