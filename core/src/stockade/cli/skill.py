"""``stockade skill``: Agent Skills, from the optional ``stockade-skills`` distribution."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import PluginError
from .common import report_error

if TYPE_CHECKING:
    import argparse


def skill_command(args: argparse.Namespace, _parser: object = None) -> int:
    """List, read or run skills."""
    try:
        from stockade_skills.cli import main
    except ImportError as error:
        missing = getattr(error, "name", None) or "stockade_skills"
        return report_error(
            PluginError(
                f"Agent Skills are not installed ({missing} cannot be imported)",
                hint="install the stockade-skills distribution: `pip install stockade-skills`, "
                "or `uv sync` in the Stockade workspace",
                details={"missing": missing},
            ),
            as_json=args.json,
        )
    status: int = main(args)
    return status
