"""What the ``test_local_executor_*.py`` files share: a request in the one mode that runs
without a sandbox plugin, so the local executor itself is what a test sees."""

from __future__ import annotations

from stockade.request.spec import ExecRequest

FULL = "danger-full-access"


def req(argv: list[str], **fields: object) -> ExecRequest:
    fields.setdefault("mode", FULL)
    return ExecRequest(argv, **fields)  # type: ignore[arg-type]
