"""Example plugin offering a ``stockade`` subcommand and an MCP tool: counting a file's lines.

An entry point would name this module (``count = "my_pkg.plugin"``). Every host imports a
plugin module, so it imports only the standard library and light parts of ``stockade``; a
real command's heavy code would be imported inside its handler. Tested by
tests/test_docs_hooks.py.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from stockade import hookimpl
from stockade.errors import UsageError
from stockade.frontends import CliCommand, CliContext, McpSession, McpTool, ToolOutput, ToolSwitch

if TYPE_CHECKING:
    from stockade.run.executor import AbortToken


def count(path: str) -> dict[str, int]:
    """The lines and bytes of the file at ``path``."""
    with open(path, "rb") as f:
        data = f.read()
    return {"lines": data.count(b"\n"), "bytes": len(data)}


# --8<-- [start:cli_commands]
def count_arguments(parser: argparse.ArgumentParser, _cli: CliContext) -> None:
    """``stockade count PATH [--json]``."""
    parser.add_argument("path", metavar="PATH")
    parser.add_argument("--json", action="store_true")


def count_command(args: argparse.Namespace, _cli: CliContext) -> int:
    """Print the file's line count; a file that cannot be read is a usage error."""
    try:
        counted = count(args.path)
    except OSError as error:
        raise UsageError(f"cannot read {args.path}: {error.strerror}") from None
    print(json.dumps(counted) if args.json else f"{counted['lines']} {args.path}")
    return 0


@hookimpl
def stockade_cli_commands(add: Callable[[CliCommand], None]) -> None:
    """``stockade count``."""
    add(CliCommand("count", "count a file's lines", count_arguments, count_command))


# --8<-- [end:cli_commands]


# --8<-- [start:mcp_tools]
def count_lines(
    session: McpSession, arguments: Mapping[str, Any], _abort: AbortToken
) -> ToolOutput:
    """Count the lines of a file inside the served workspace (on a worker thread)."""
    path = os.path.realpath(os.path.join(session.root, arguments["path"]))
    if os.path.commonpath([path, session.root]) != session.root:
        raise UsageError(f"{arguments['path']} is outside the workspace")
    try:
        counted = count(path)
    except OSError as error:
        raise UsageError(f"cannot read {arguments['path']}: {error.strerror}") from None
    if not session.switches["--count-bytes"]:
        del counted["bytes"]
    return ToolOutput(f"{counted['lines']} lines", counted)


@hookimpl
def stockade_mcp_tools(add: Callable[[McpTool], None]) -> None:
    """The ``count_lines`` tool, and ``stockade mcp --count-bytes``."""
    add(
        McpTool(
            "count_lines",
            "Count a file's lines",
            "The number of lines of a file in the workspace.",
            {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
            count_lines,
            read_only=True,
            destructive=False,
            idempotent=True,
            open_world=False,
            switches=(ToolSwitch("--count-bytes", "count_lines also counts bytes"),),
        )
    )


# --8<-- [end:mcp_tools]
