"""The tools the server offers: names, descriptions, input and output schemas, annotations.

The descriptions carry the numbers a model needs (the default timeout and its cap) from the
configuration the server runs with. Schemas use ``anyOf`` rather than lists of types, which
some clients cannot read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp import types

from stockade.workspace.file_types import READ_LIMIT

if TYPE_CHECKING:
    from stockade.config.schema import Config
    from stockade.frontends import McpTool

OUTPUT_LIMIT = 256 * 1024
"""The most bytes of a whole stream one ``read_output`` window returns."""


def _nullable(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}], "description": description}


_ARGV: dict[str, Any] = {
    "type": "array",
    "items": {"type": "string"},
    "minItems": 1,
    "description": "the program and its arguments, one string each; no shell parses them",
}
_CWD = _nullable(
    {"type": "string"},
    "working directory inside the workspace, relative to it (default: the workspace); "
    "a folder outside it, by `..`, an absolute path or a symlink, is refused",
)
_TASK_ID: dict[str, Any] = {
    "type": "string",
    "description": "the id start_command returned, like task-1",
}
_PATH: dict[str, Any] = {
    "type": "string",
    "description": "a path relative to the workspace; nothing outside it is reachable",
}

_STREAM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "truncated": {"type": "boolean"},
        "total_bytes": {"type": "integer"},
    },
}
_ERROR_PROPERTIES: dict[str, Any] = {
    "code": {"type": "string"},
    "message": {"type": "string"},
    "hint": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "details": {"type": "object"},
}
_RESULT_REQUIRED = ["action_id", "argv", "exit_code", "signal", "timed_out", "stdout", "stderr"]

RUN_OUTPUT: dict[str, Any] = {
    "type": "object",
    "description": (
        "the command's result (stockade.request.result.RunResult, each stream's text cut to "
        "its head and tail), or, with isError, the error that refused it: code, message, hint, "
        "details"
    ),
    "properties": {
        "action_id": {"type": "string"},
        "argv": {"type": "array", "items": {"type": "string"}},
        "exit_code": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "signal": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "timed_out": {"type": "boolean"},
        "aborted": {"type": "boolean"},
        "duration_ms": {"type": "number"},
        "stdout": _STREAM,
        "stderr": _STREAM,
        "sandbox": {"type": "object"},
        "limit_hit": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        **_ERROR_PROPERTIES,
    },
    "anyOf": [{"required": _RESULT_REQUIRED}, {"required": ["code", "message"]}],
}
"""``run_command``'s output schema: a result, or an error; every result it gives matches."""


def _object(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    """An input schema a strict client can satisfy: every property it leaves optional may
    be null (strict clients send every key, null for the ones not meant), with no default
    (the description says it)."""
    return {
        "type": "object",
        "properties": {
            name: schema if name in required else _optional(schema)
            for name, schema in properties.items()
        },
        "required": list(required),
        "additionalProperties": False,
    }


def _optional(schema: dict[str, Any]) -> dict[str, Any]:
    if any(choice.get("type") == "null" for choice in schema.get("anyOf", ())):
        return schema
    inner = {k: v for k, v in schema.items() if k not in ("description", "default")}
    description = schema.get("description", "")
    if "default" in schema:
        description = f"{description} (default {schema['default']!r})".strip()
    return _nullable(inner, description or "may be null: left out")


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


_TASK_VIEW = {
    "type": "string",
    "description": "a running background task's id (start_command's): read the folder as "
    "that task sees it now, its writes included (they reach the folder itself only when it "
    "ends)",
}
_READ_PRIVATE = {
    "type": "boolean",
    "default": False,
    "description": "show the command the profile's private paths, hidden otherwise; the run "
    "then holds private data, and a later network step of a run that has read somebody else's "
    "words waits for a person",
}

RUNS = {"read_only": False, "destructive": True, "idempotent": False, "open_world": True}
READS = {"read_only": True, "destructive": False, "idempotent": True, "open_world": False}
ASKS = (
    "A shell or an interpreter given code inline (`sh -c`, `bash -c`, `python -c`, "
    "`node -e`) always waits for a person: put code in a file and run the file. "
)


def command_tools(config: Config) -> list[types.Tool]:
    """The command tools, their descriptions naming ``config``'s time bounds."""
    default, cap = f"{config.timeout.default:g}", f"{config.timeout.max:g}"
    timeout = _nullable(
        {"type": "number", "exclusiveMinimum": 0},
        f"seconds before the command is killed (default {default}, at most {cap})",
    )
    command = _object(
        {"argv": _ARGV, "cwd": _CWD, "timeout": timeout, "read_private": _READ_PRIVATE}, "argv"
    )
    return [
        types.Tool(
            name="run_command",
            description=(
                "Run one command by argv (no shell) in the agent's workspace and wait for it. "
                "It is classified, approved, confined by a sandbox, bounded in output and "
                f"time (killed after {default} s unless `timeout` says otherwise, at most "
                f"{cap} s), and recorded. {ASKS}A command that may run longer (a build, a "
                "server, a watcher) belongs in start_command. A command that needs a person "
                "is asked about (elicitation) or held for `stockade approve`. Returns the "
                "exit status and the head and tail of the output; read_output gives all of it."
            ),
            input_schema=command,
            output_schema=RUN_OUTPUT,
            annotations=_annotations("Run a command", **RUNS),
        ),
        types.Tool(
            name="start_command",
            description=(
                "Start one command by argv in the background, with the same checks as "
                "run_command; returns a task id at once (after a person's approval, when it "
                f"needs one). Its timeout is {default} s unless `timeout` says otherwise, at "
                f"most {cap} s. {ASKS}Read its output with read_output, stop it with "
                "kill_command."
            ),
            input_schema=command,
            annotations=_annotations("Start a background command", **RUNS),
        ),
        types.Tool(
            name="read_output",
            description=(
                "With task_id alone: what a background task printed since the previous "
                "read_output, and its status; once it has ended, its exit status and result. "
                "With `stream`, `offset` or `limit`, or with the action_id of a command's "
                f"result: a window of that command's whole stream (up to {OUTPUT_LIMIT} "
                "bytes from `offset`), even the part a result left out; `next_offset` is "
                "where the next window starts."
            ),
            input_schema=_object(
                {
                    "task_id": _TASK_ID,
                    "action_id": {
                        "type": "string",
                        "description": "the action_id of a run_command result",
                    },
                    "stream": {
                        "type": "string",
                        "enum": ["stdout", "stderr"],
                        "default": "stdout",
                        "description": "the stream to read",
                    },
                    "offset": {
                        "type": "integer",
                        "minimum": 0,
                        "default": 0,
                        "description": "the byte of the stream to start at",
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": OUTPUT_LIMIT,
                        "description": f"bytes to read at most (at most {OUTPUT_LIMIT})",
                    },
                }
            ),
            annotations=_annotations(
                "Read a command's output",
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
        input_schema=_object({"path": {**_PATH, "default": "."}, "task_id": _TASK_VIEW}),
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
                "read_private": _READ_PRIVATE,
                "task_id": _TASK_VIEW,
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "default": 0,
                    "description": "the byte of the file to start at",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": READ_LIMIT,
                    "description": f"bytes to read at most (at most {READ_LIMIT})",
                },
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


def tools(config: Config) -> list[types.Tool]:
    """The server's own tools (not the ones plugins offer), for a server running with
    ``config``."""
    return [*command_tools(config), *FILE_TOOLS]


def declared(tool: McpTool) -> types.Tool:
    """The declaration of a tool a plugin offers: its schemas and annotations."""
    return types.Tool(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        input_schema=dict(tool.input_schema),
        output_schema=None if tool.output_schema is None else dict(tool.output_schema),
        annotations=_annotations(
            tool.title,
            read_only=tool.read_only,
            destructive=tool.destructive,
            idempotent=tool.idempotent,
            open_world=tool.open_world,
        ),
    )
