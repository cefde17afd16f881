"""A step that would ask goes through the SDK's own tool approval.

:func:`shell` is the SDK's ``Shell`` capability with one change: its ``exec_command`` tool's
``needs_approval`` asks Stockade. The check admits the exact argv the tool will run
(classified and decided, recorded as an action); a step the policy holds makes the SDK
interrupt the run with a ``ToolApprovalItem`` that a person (``result.interruptions``,
``state.approve`` / ``state.reject``) or a policy in code answers. Only an approved call
reaches the session, which then records the approval and runs the held step; a rejected
one never runs and is declined when the session ends. Nothing is approved silently: a call
that reaches the session without that check is admitted again, and a held step comes back
as a refusal (``policy_held``), unrun.
"""

from __future__ import annotations

from typing import Any

from agents.run_context import RunContextWrapper
from agents.sandbox.capabilities.shell import Shell, ShellToolSet
from agents.sandbox.capabilities.tools.shell_tool import (
    ExecCommandArgs,
    ExecCommandTool,
    _resolve_shell,
)
from agents.sandbox.errors import InvalidManifestPathError
from pydantic import ValidationError

from .client import inner


def shell() -> Shell:
    """The SDK's shell capability, its ``exec_command`` asking Stockade whether to interrupt."""
    return Shell(configure_tools=_configure)


def _configure(toolset: ShellToolSet) -> None:
    toolset.exec_command.needs_approval = _needs_approval(toolset.exec_command)


def _needs_approval(tool: ExecCommandTool) -> Any:  # noqa: ANN401 - the SDK's callable type
    async def needs_approval(
        _context: RunContextWrapper[Any], params: dict[str, Any], _call_id: str
    ) -> bool:
        session = inner(tool.session)
        if session is None:
            return False  # another backend: nothing of Stockade's to ask about
        try:
            args = ExecCommandArgs.model_validate(params)
            command = tool._prepare_command(args)
        except (ValidationError, InvalidManifestPathError):
            return False  # the tool answers these itself, running nothing
        argv = session._prepare_exec_command(
            command, shell=_resolve_shell(args.shell, args.login), user=tool.user
        )
        return await session.admit(argv, args.yield_time_ms / 1000)

    return needs_approval
