"""The ``skill`` tool of ``stockade mcp``: a call's arguments in, the tool's output out.

The tool is :class:`~stockade_skills.SkillTool` with its schema; this module only turns a
call's arguments into its parameters and its output into a :class:`~stockade.frontends.ToolOutput`.
A run is a command like any other: cancelling the call kills it. The global safety of
skill scripts is off for the connection when ``stockade mcp`` got ``--unsafe-skills``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stockade.errors import UsageError
from stockade.frontends import McpSession, ToolOutput
from stockade.request.wire import plain
from stockade.run.executor import AbortToken

from .schema import SCHEMA
from .tool import SkillTool

UNSAFE = "--unsafe-skills"
"""The switch of ``stockade mcp`` that turns the global safety off for the connection."""


def call(session: McpSession, arguments: Mapping[str, Any], token: AbortToken) -> ToolOutput:
    """One call of the tool (on a worker thread: a run blocks until the script ends)."""
    unknown = set(arguments) - set(SCHEMA["properties"])
    if unknown:
        raise UsageError(f"the skill tool takes no {', '.join(sorted(unknown))}")
    name = arguments.get("skill_name")
    resource = arguments.get("resource")
    args = arguments.get("args", [])
    offset, max_chars = arguments.get("offset", 0), arguments.get("max_chars")
    execute, timeout = arguments.get("execute", False), arguments.get("timeout")
    if not isinstance(name, str) or not (resource is None or isinstance(resource, str)):
        raise UsageError("skill_name (and resource, when given) must be strings")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise UsageError("args must be a list of strings")
    if not isinstance(execute, bool) or not isinstance(offset, int) or isinstance(offset, bool):
        raise UsageError("execute must be a boolean and offset an integer")
    if max_chars is not None and (not isinstance(max_chars, int) or isinstance(max_chars, bool)):
        raise UsageError("max_chars must be an integer")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)):
        raise UsageError("timeout must be a number of seconds")
    skill = SkillTool(
        session.host,
        profile=session.agent,
        unsafe=session.switches.get(UNSAFE, False),
        origin="mcp",
    )
    out = skill(
        name,
        resource,
        offset=offset,
        max_chars=max_chars,
        execute=execute,
        args=args,
        timeout=None if timeout is None else float(timeout),
        abort=token,
    )
    shown = out.text
    if out.next_offset is not None:
        shown += f"\n[more follows: read on with offset {out.next_offset}]"
    structured: dict[str, Any] = plain(out)
    return ToolOutput(shown, structured)
