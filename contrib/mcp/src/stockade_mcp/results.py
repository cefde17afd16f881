"""Tool results: text for the model, structured content capped like the text, errors.

Every captured stream inside a structured result (a command's ``stdout`` and ``stderr``,
wherever they sit: a result, a task, a task's result) keeps only the head and tail the text
shows: a client that hands structured content to its model hands it kilobytes, not the
megabyte a command may print. A cut stream says so (``truncated``, ``cut_chars``), and
``read_output`` reads the whole of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
from mcp import types

from stockade.errors import StockadeError, UsageError
from stockade.request.wire import plain

from . import render

if TYPE_CHECKING:
    from stockade.request.result import RunResult

Outcome = types.CallToolResult | types.InputRequiredResult
"""What a tool call answers: a result, or (2026-07-28) a question for the client's person."""

_STREAM_KEYS = frozenset({"text", "truncated", "total_bytes", "sha256"})


def text(value: str) -> types.TextContent:
    """A text block."""
    return types.TextContent(type="text", text=value)


def capped(value: Any) -> Any:  # noqa: ANN401 - JSON-ready data of any shape
    """``value`` as JSON data, every captured stream's text cut to the head and tail the
    text shows; a stream cut here is marked ``truncated`` with the characters cut."""
    if isinstance(value, dict):
        out = {key: capped(item) for key, item in value.items()}
        if out.keys() >= _STREAM_KEYS and isinstance(out["text"], str):
            shown, cut = render.bounded(out["text"])
            if cut:
                out["text"], out["truncated"], out["cut_chars"] = shown, True, cut
        return out
    if isinstance(value, list):
        return [capped(item) for item in value]
    return value


def _plain(data: object) -> object:
    """``data`` with every attrs value in it made plain (a value, or mappings and lists of
    them)."""
    if attrs.has(type(data)):
        return plain(data)
    if isinstance(data, Mapping):
        return {key: _plain(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [_plain(value) for value in data]
    return data


def ok(message: str, data: object) -> types.CallToolResult:
    """A tool's success: ``message`` as text, ``data`` as capped structured content."""
    return types.CallToolResult(
        content=[text(message)], structured_content=capped(render.jsonable(_plain(data)))
    )


def success(result: RunResult, *, lead: str = "") -> types.CallToolResult:
    """A command's result: its status and the head and tail of its output as text, the
    result as data (capped alike).

    A command that ran is a success of the tool, whatever its exit status.
    """
    return ok(lead + render.result_text(result), result)


def failure(error: StockadeError) -> types.CallToolResult:
    """A tool error: the error's ``to_dict()`` as data, its message and hint as text.

    The data matches ``run_command``'s output schema (its error branch), so a client that
    checks results against it shows the error, hint included.
    """
    if error.code in _TO_A_MODEL:
        error.hint = _TO_A_MODEL[error.code]
    return types.CallToolResult(
        content=[text(render.error_text(error))],
        structured_content=render.jsonable(error.to_dict()),
        is_error=True,
    )


_TO_A_MODEL = {
    "unsafe_root": (
        "you cannot choose where commands may write: the person who started this server "
        "chose its workspace, and this folder may never be written (a home, a system "
        "folder, the store). Tell the person, who can start the server in a project "
        "folder, or do without this command"
    ),
}
"""Hints the core words for a person at a terminal (``--cwd``, ``--agent``), said to the model
that called the tool instead."""


def internal(error: Exception) -> types.CallToolResult:
    """An unexpected failure inside the server, as a tool error of code ``internal``."""
    return types.CallToolResult(
        content=[text(f"stockade: internal error: {type(error).__name__}: {error}")],
        structured_content={
            "code": "internal",
            "message": str(error),
            "hint": "this is a bug of the server; its traceback is on its stderr",
            "details": {},
        },
        is_error=True,
    )


def string(arguments: Mapping[str, Any], name: str, *, default: str | None = None) -> str:
    """A string argument, or a usage error."""
    value = arguments.get(name, default)
    if not isinstance(value, str):
        raise UsageError(f"{name} must be a string")
    return value


def integer(arguments: Mapping[str, Any], name: str, default: int, *, least: int = 0) -> int:
    """An integer argument of at least ``least``, or a usage error."""
    value = arguments.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise UsageError(f"{name} must be an integer of at least {least}")
    return value


def task_id(arguments: Mapping[str, Any]) -> str:
    """The ``task_id`` argument."""
    return string(arguments, "task_id")


def unknown_arguments(tool: str, arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> None:
    """Refuse arguments ``schema`` does not name: a model that passes ``"shell": true``
    must learn that nothing read it.

    Raises:
        UsageError: naming the unknown arguments and the ones the tool takes.
    """
    known = schema.get("properties", {})
    unknown = sorted(set(arguments) - set(known))
    if unknown:
        raise UsageError(
            f"{tool} takes no argument {', '.join(map(repr, unknown))}",
            hint=f"{tool} takes {', '.join(known) or 'no arguments'}; "
            "a command is always run by argv, never through a shell",
            details={"unknown": unknown, "known": list(known)},
        )
