"""The skills plugin: the ``stockade skill`` command and the ``skill`` tool of ``stockade mcp``.

Every host imports this module (entry point ``skills``), so it imports next to nothing:
``stockade.frontends`` and the schema when the offers are asked for, the tool's code when a
command or a tool call needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from stockade import hookimpl

if TYPE_CHECKING:
    import argparse

    from stockade.frontends import CliCommand, CliContext, McpSession, McpTool, ToolOutput
    from stockade.run.executor import AbortToken

DESCRIPTION = (
    "Agent Skills: with only skill_name, a skill's instructions and its list of files; with "
    "a resource, that file's text (a window: offset, max_chars). With execute: true, run the "
    "resource (a script under scripts/) with args, in the sandbox, through the same checks as "
    "run_command; it runs only behind the double-safety gate (the global safety off, the "
    "skill declaring safe_mode: false, the interpreter allowed). Output comes in a "
    "[SKILL_SCRIPT_EXECUTED] envelope."
)


def _arguments(parser: argparse.ArgumentParser, _cli: CliContext) -> None:
    """``stockade skill list|show|run``."""
    import argparse

    tools = parser.add_subparsers(
        dest="tool", metavar="TOOL", parser_class=type(parser), required=True
    )
    listing = tools.add_parser("list", help="the skills found, with any problems in them")
    show = tools.add_parser("show", help="a skill's instructions, or one of its resources")
    show.add_argument("name", metavar="SKILL")
    show.add_argument("resource", metavar="RESOURCE", nargs="?")
    show.add_argument("--offset", type=int, default=0, metavar="CHARS")
    show.add_argument("--max-chars", type=int, default=None, metavar="CHARS")
    run = tools.add_parser(
        "run",
        help="run a skill's script behind the double-safety gate, in the sandbox",
        description="Run SCRIPT (under scripts/) of SKILL with ARGS. It runs only when the "
        "global safety is off (--unsafe or [skills] safe_mode = false), the skill declares "
        "safe_mode: false, and the agent may run the script's interpreter.",
    )
    run.add_argument("name", metavar="SKILL")
    run.add_argument("resource", metavar="SCRIPT")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARG")
    run.add_argument("--timeout", type=float, default=None, metavar="SECONDS")
    run.add_argument(
        "--unsafe", action="store_true", help="turn the global safety off for this invocation"
    )
    run.add_argument("--yes", action="store_true", help="approve in advance what would ask")
    for sub in (listing, show, run):
        sub.add_argument("--profile", "--agent", metavar="AGENT", default="default")
        sub.add_argument("--json", action="store_true")


def _handle(args: argparse.Namespace, cli: CliContext) -> int:
    from .cli import main

    return main(args, cli)


def _call(session: McpSession, arguments: Mapping[str, Any], token: AbortToken) -> ToolOutput:
    from .mcp_tool import call

    return call(session, arguments, token)


@hookimpl
def stockade_cli_commands(add: Callable[[CliCommand], None]) -> None:
    """``stockade skill``."""
    from stockade.frontends import CliCommand

    add(CliCommand("skill", "list, read or run Agent Skills", _arguments, _handle))


@hookimpl
def stockade_mcp_tools(add: Callable[[McpTool], None]) -> None:
    """The ``skill`` tool, and ``stockade mcp --unsafe-skills``."""
    from stockade.frontends import McpTool, ToolSwitch

    from .schema import SCHEMA

    add(
        McpTool(
            "skill",
            "Read or run a skill",
            DESCRIPTION,
            SCHEMA,
            _call,
            switches=(
                ToolSwitch(
                    "--unsafe-skills",
                    "turn the global safety of skill scripts off (the skill tool's gate)",
                ),
            ),
        )
    )
