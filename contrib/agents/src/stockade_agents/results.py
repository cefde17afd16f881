"""What the SDK gets back from a Stockade step: an ``ExecResult``, or a refusal as one."""

from __future__ import annotations

import json
import signal

from agents.sandbox.types import ExecResult

from stockade.errors import StockadeError
from stockade.request.result import RunResult

REFUSED = 126
"""The exit code of a step Stockade refused (held, denied, unusable): the shell's "cannot
execute", which the step never reached."""


def of_run(result: RunResult) -> ExecResult:
    """A finished command as the SDK's ``ExecResult``; a signal is the shell's ``128 + N``."""
    code = result.exit_code
    if code is None:
        code = 124 if result.timed_out else 128 + _signal_number(result.signal)
    return ExecResult(
        stdout=result.stdout.text.encode("utf-8"),
        stderr=result.stderr.text.encode("utf-8"),
        exit_code=code,
    )


def refusal(error: StockadeError) -> ExecResult:
    """A step that did not run, as a structured result the model reads: one JSON line on
    stderr (``{"stockade": {"code", "message", "hint", "details"}}``) and exit code 126."""
    body = json.dumps({"stockade": error.to_dict()}, sort_keys=True, default=str)
    return ExecResult(stdout=b"", stderr=body.encode("utf-8") + b"\n", exit_code=REFUSED)


def _signal_number(name: str | None) -> int:
    if not name:
        return 1
    try:
        return int(signal.Signals[name if name.startswith("SIG") else f"SIG{name}"])
    except KeyError:
        return 1
