"""The MCP plugin: the ``stockade mcp`` command, with a switch for every offered tool's.

Every host imports this module (entry point ``mcp``), so it imports next to nothing:
``stockade.frontends`` when the offer is asked for, the server (and the MCP SDK) when the
command runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from stockade import hookimpl

if TYPE_CHECKING:
    import argparse

    from stockade.frontends import CliCommand, CliContext

SERVER_TOOLS = (
    "run_command",
    "start_command",
    "read_output",
    "kill_command",
    "list_commands",
    "file_list",
    "file_read",
    "file_write",
)
"""The server's own tools: no plugin may offer a tool of these names."""

_SWITCH = "switch"  # the prefix of a switch's dest, so the handler finds every switch given


def _arguments(parser: argparse.ArgumentParser, cli: CliContext) -> None:
    """``--agent`` and every offered tool's switches.

    Raises:
        PluginError: two plugins offer one tool name, a tool takes a server tool's name, or
            a switch takes an option ``stockade mcp`` has.
    """
    import argparse

    from stockade.errors import PluginError

    parser.add_argument(
        "--agent",
        "--profile",
        dest="profile",
        metavar="AGENT",
        default="default",
        help="agent profile of every command",
    )
    added: set[str] = set()
    for tool in cli.hooks.mcp_tools(SERVER_TOOLS).values():
        for switch in tool.switches:
            if switch.flag in added:  # two tools may read one switch
                continue
            try:
                parser.add_argument(
                    switch.flag, action="store_true", dest=_SWITCH + switch.flag, help=switch.help
                )
            except argparse.ArgumentError:
                raise PluginError(
                    f"the MCP tool {tool.name!r} has a switch {switch.flag!r}, which "
                    "`stockade mcp` already has",
                    hint="uninstall or block the plugin that offers it",
                    details={"tool": tool.name, "switch": switch.flag},
                ) from None
            added.add(switch.flag)


def _handle(args: argparse.Namespace, _cli: CliContext) -> int:
    from .server import main

    switches = {
        dest.removeprefix(_SWITCH): bool(given)
        for dest, given in vars(args).items()
        if dest.startswith(_SWITCH + "--")
    }
    return main(config=args.config, agent=args.profile, switches=switches)


@hookimpl
def stockade_cli_commands(add: Callable[[CliCommand], None]) -> None:
    """``stockade mcp``."""
    from stockade.frontends import CliCommand

    add(
        CliCommand(
            "mcp",
            "serve an agent's tools over MCP on stdio",
            _arguments,
            _handle,
            description="Serve run_command, background tasks, the file tools and every "
            "tool a plugin offers over MCP (stdio) for one agent profile, until the client "
            "leaves.",
        )
    )
