"""``stockade mcp``: the MCP server on stdio, from the optional ``stockade-mcp`` distribution."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import PluginError
from .common import optional, report_error

if TYPE_CHECKING:
    import argparse


def mcp_command(args: argparse.Namespace, _parser: object = None) -> int:
    """Serve the agent's tools over MCP until the client leaves."""
    try:
        server = optional(
            "stockade_mcp.server", distribution="stockade-mcp", what="the MCP server is"
        )
    except PluginError as error:
        return report_error(error, as_json=False)
    status: int = server.main(
        config=args.config, agent=args.profile, unsafe_skills=args.unsafe_skills
    )
    return status
