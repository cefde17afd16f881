"""The ``skill`` tool over MCP, offered when ``stockade-skills`` is installed.

The tool is the plugin's own :class:`~stockade_skills.SkillTool` with its schema; this module
only turns a call's arguments into its parameters and its output into a tool result. A run
is a command like any other: cancelling the call kills it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mcp import types

from stockade.errors import UsageError
from stockade.request.wire import plain
from stockade.run.executor import AbortToken

from . import render

if TYPE_CHECKING:
    from stockade.host import Host
    from stockade_skills import SkillTool

DESCRIPTION = (
    "Agent Skills: with only skill_name, a skill's instructions and its list of files; with "
    "a resource, that file's text (a window: offset, max_chars). With execute: true, run the "
    "resource (a script under scripts/) with args, in the sandbox, through the same checks as "
    "run_command; it runs only behind the double-safety gate (the global safety off, the "
    "skill declaring safe_mode: false, the interpreter allowed). Output comes in a "
    "[SKILL_SCRIPT_EXECUTED] envelope."
)


def tool() -> types.Tool | None:
    """The tool's declaration, or ``None`` when the skills plugin is not installed."""
    try:
        from stockade_skills import SCHEMA
    except ImportError:
        return None
    return types.Tool(
        name="skill",
        description=DESCRIPTION,
        input_schema=SCHEMA,
        annotations=types.ToolAnnotations(
            title="Read or run a skill",
            read_only_hint=False,
            destructive_hint=True,
            idempotent_hint=False,
            open_world_hint=True,
        ),
    )


def make(host: Host, *, agent: str, unsafe: bool) -> SkillTool:
    """The skill tool of this connection's agent."""
    from stockade_skills import SkillTool

    return SkillTool(host, profile=agent, unsafe=unsafe, origin="mcp")


def call(skill: SkillTool, arguments: Mapping[str, Any], token: AbortToken) -> types.CallToolResult:
    """One call of the tool (on a thread: a run blocks until the script ends)."""
    unknown = set(arguments) - set(skill_schema_properties())
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
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=shown)],
        structured_content=render.jsonable(plain(out)),
    )


def skill_schema_properties() -> Mapping[str, Any]:
    """The parameters the tool takes."""
    from stockade_skills import SCHEMA

    properties: Mapping[str, Any] = SCHEMA["properties"]
    return properties
