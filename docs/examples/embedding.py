"""Calling Stockade from an agent loop (tested by tests/test_docs_embedding.py).

The examples name no ``mode``, so every command gets the configured, confined mode
(``workspace-write`` by default, or less for a command that only reads). Where no sandbox
can confine it, the command is refused with ``SandboxUnavailable``; it never runs unconfined
unless someone writes ``mode="danger-full-access"`` on purpose.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from stockade.errors import PolicyHeld, StockadeError
from stockade.host import Host
from stockade.request.result import RunResult
from stockade.request.spec import ExecRequest


# --8<-- [start:run]
def run_tool_call(host: Host, argv: Sequence[str], cwd: str) -> dict[str, object]:
    """Run one command for the model; hand back a structured value, never a traceback."""
    request = ExecRequest(argv, cwd, timeout=10)
    try:
        result = host.run(request)
    except StockadeError as error:  # denied, held, not found, ...: it did not run
        # A held command's details name its run_id and step, for a person to approve.
        return {"error": error.to_dict()}
    return {
        "exit_code": result.exit_code,
        "signal": result.signal,
        "timed_out": result.timed_out,
        "stdout": result.stdout.text,
        "stderr": result.stderr.text,
        "truncated": result.stdout.truncated or result.stderr.truncated,
    }


# --8<-- [end:run]


# --8<-- [start:run_async]
async def run_all(host: Host, commands: Sequence[Sequence[str]], cwd: str) -> list[RunResult]:
    """Run several commands at once; cancelling this task kills every one still running."""
    requests = [ExecRequest(argv, cwd) for argv in commands]
    return list(await asyncio.gather(*(host.run_async(r) for r in requests)))


# --8<-- [end:run_async]


# --8<-- [start:resume]
def run_approved(host: Host, held: PolicyHeld, person: str) -> RunResult:
    """Record a person's yes to a held step, then run it exactly as it was held."""
    run_id, step = str(held.details["run_id"]), int(str(held.details["step"]))
    host.answer(run_id, step, approve=True, by=person)
    return host.resume(run_id, step)


# --8<-- [end:resume]


# --8<-- [start:host]
def open_host(*plugins: object) -> Host:
    """A host configured from STOCKADE_CONFIG or the XDG config, with extra plugins."""
    return Host.from_environment(plugins=plugins)


# --8<-- [end:host]
