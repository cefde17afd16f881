"""``stockade mcp``: the MCP server on stdio, from the optional ``stockade-mcp`` distribution."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import PluginError
from .common import report_error

if TYPE_CHECKING:
    import argparse


def mcp_command(args: argparse.Namespace, _parser: object = None) -> int:
    """Serve the agent's tools over MCP until the client leaves."""
    try:
        from stockade_mcp.server import main
    except ImportError as error:
        missing = getattr(error, "name", None) or "stockade_mcp"
        return report_error(
            PluginError(
                f"the MCP server is not installed ({missing} cannot be imported)",
                hint="install the stockade-mcp distribution (it brings the mcp SDK): "
                "`pip install stockade-mcp`, or `uv sync` in the Stockade workspace",
                details={"missing": missing},
            ),
            as_json=False,
        )
    status: int = main(config=args.config, agent=args.profile, unsafe_skills=args.unsafe_skills)
    return status
