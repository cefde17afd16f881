"""The tools the server offers: names, descriptions, input schemas and annotations."""

from __future__ import annotations

from typing import Any

from mcp import types

from stockade.files import READ_LIMIT

_ARGV: dict[str, Any] = {
    "type": "array",
    "items": {"type": "string"},
    "minItems": 1,
    "description": "the program and its arguments, one string each; no shell parses them",
}
_CWD: dict[str, Any] = {
    "type": ["string", "null"],
    "description": "working directory inside the workspace (default: the workspace)",
}
_TIMEOUT: dict[str, Any] = {
    "type": ["number", "null"],
    "exclusiveMinimum": 0,
    "description": "seconds before the command is killed (capped by the configuration)",
}
_TASK_ID: dict[str, Any] = {
    "type": "string",
    "description": "the id start_command returned, like task-1",
}
_PATH: dict[str, Any] = {
    "type": "string",
    "description": "a path relative to the workspace; nothing outside it is reachable",
}

# A result is an object; its keys are those of stockade.types.RunResult (see docs/mcp.md).
_RUN_RESULT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action_id": {"type": "string"},
        "argv": {"type": "array", "items": {"type": "string"}},
        "exit_code": {"type": ["integer", "null"]},
        "signal": {"type": ["string", "null"]},
        "timed_out": {"type": "boolean"},
        "aborted": {"type": "boolean"},
        "duration_ms": {"type": "number"},
        "stdout": {"type": "object"},
        "stderr": {"type": "object"},
        "sandbox": {"type": "object"},
        "limit_hit": {"type": ["string", "null"]},
    },
    "required": ["action_id", "argv", "exit_code", "signal", "timed_out", "stdout", "stderr"],
}


def _object(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


def _annotations(
    title: str, *, read_only: bool, destructive: bool, idempotent: bool, open_world: bool
) -> types.ToolAnnotations:
    return types.ToolAnnotations(
        title=title,
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=open_world,
    )


RUNS = {"read_only": False, "destructive": True, "idempotent": False, "open_world": True}
READS = {"read_only": True, "destructive": False, "idempotent": True, "open_world": False}

COMMAND_TOOLS = [
    types.Tool(
        name="run_command",
        description=(
            "Run one command by argv (no shell) in the agent's workspace and wait for it. "
            "It is classified, approved, confined by a sandbox, bounded in time and output, "
            "and recorded. A command that needs a person is asked about (elicitation) or "
            "held for `stockade approve`. Returns the exit status and the output."
        ),
        input_schema=_object({"argv": _ARGV, "cwd": _CWD, "timeout": _TIMEOUT}, "argv"),
        output_schema=_RUN_RESULT,
        annotations=_annotations("Run a command", **RUNS),
    ),
    types.Tool(
        name="start_command",
        description=(
            "Start one command by argv in the background, with the same checks as "
            "run_command; returns a task id at once. Read its output with read_output, "
            "stop it with kill_command."
        ),
        input_schema=_object({"argv": _ARGV, "cwd": _CWD, "timeout": _TIMEOUT}, "argv"),
        annotations=_annotations("Start a background command", **RUNS),
    ),
    types.Tool(
        name="read_output",
        description=(
            "What a background task printed since the previous read_output, and its status; "
            "once it has ended, its exit status and result."
        ),
        input_schema=_object({"task_id": _TASK_ID}, "task_id"),
        annotations=_annotations(
            "Read a task's output",
            read_only=True,
            destructive=False,
            idempotent=False,
            open_world=False,
        ),
    ),
    types.Tool(
        name="kill_command",
        description="Kill a background task and everything it started; returns once it ended.",
        input_schema=_object({"task_id": _TASK_ID}, "task_id"),
        annotations=_annotations(
            "Kill a task", read_only=False, destructive=True, idempotent=True, open_world=False
        ),
    ),
    types.Tool(
        name="list_commands",
        description="The background tasks of this session, oldest first, with their status.",
        input_schema=_object({}),
        annotations=_annotations("List tasks", **READS),
    ),
]

FILE_TOOLS = [
    types.Tool(
        name="file_list",
        description="The entries of a folder in the workspace: names, kinds and sizes.",
        input_schema=_object({"path": {**_PATH, "default": "."}}),
        annotations=_annotations("List a folder", **READS),
    ),
    types.Tool(
        name="file_read",
        description=(
            f"Up to `limit` bytes (at most {READ_LIMIT}) of a text file in the workspace, "
            "from `offset`; a binary file is described instead. `offset + returned` is "
            "where the next read starts."
        ),
        input_schema=_object(
            {
                "path": _PATH,
                "offset": {"type": "integer", "minimum": 0, "default": 0},
                "limit": {"type": "integer", "minimum": 1, "maximum": READ_LIMIT},
            },
            "path",
        ),
        annotations=_annotations("Read a file", **READS),
    ),
    types.Tool(
        name="file_write",
        description=(
            "Replace a whole file in the workspace with `content` (UTF-8, up to 1 MiB), "
            "atomically; parent folders are made. `.git` and agent configuration are refused."
        ),
        input_schema=_object({"path": _PATH, "content": {"type": "string"}}, "path", "content"),
        annotations=_annotations(
            "Write a file", read_only=False, destructive=True, idempotent=True, open_world=False
        ),
    ),
]

TOOLS = [*COMMAND_TOOLS, *FILE_TOOLS]
