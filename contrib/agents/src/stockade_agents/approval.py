"""A step that would ask goes through the SDK's own tool approval.

:func:`shell` is the SDK's ``Shell`` capability with one change: its ``exec_command`` tool's
``needs_approval`` asks Stockade. The check admits the exact argv the tool will run
(classified and decided, recorded as an action); a step the policy holds makes the SDK
interrupt the run with a ``ToolApprovalItem`` that a person (``result.interruptions``,
``state.approve`` / ``state.reject``) or a policy in code answers. Only an approved call
reaches the session, which then records the approval and runs the held step. A rejected
one never runs, and the SDK does not tell the sandbox: the tool's ``is_enabled``, which the
SDK asks with the run's context before every model turn, finds the rejection there and
declines the held step in the store, so ``stockade pending`` no longer lists it and the
record says declined.
Nothing is approved silently: a call that reaches the session without that check is
admitted again, and a held step comes back as a refusal (``policy_held``), unrun.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from agents.agent import AgentBase
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
    toolset.exec_command.is_enabled = _declining_rejected(toolset.exec_command)


def _declining_rejected(tool: ExecCommandTool) -> Any:  # noqa: ANN401 - the SDK's callable type
    enabled = tool.is_enabled

    async def is_enabled(context: RunContextWrapper[Any], agent: AgentBase) -> bool:
        session = inner(tool.session)
        if session is not None and session.state.held:
            rejected = {
                call.call_id
                for call in session.state.held
                if call.call_id and context.is_tool_approved(tool.name, call.call_id) is False
            }
            if rejected:
                await asyncio.to_thread(session.decline_rejected, rejected)
        if callable(enabled):
            answer = enabled(context, agent)
            return bool(await answer if inspect.isawaitable(answer) else answer)
        return enabled

    return is_enabled


def _needs_approval(tool: ExecCommandTool) -> Any:  # noqa: ANN401 - the SDK's callable type
    async def needs_approval(
        _context: RunContextWrapper[Any], params: dict[str, Any], call_id: str
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
        return await session.admit(argv, args.yield_time_ms / 1000, call_id=call_id)

    return needs_approval
