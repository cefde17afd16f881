"""``stockade skill``: Agent Skills, from the optional ``stockade-skills`` distribution."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import PluginError
from .common import optional, report_error

if TYPE_CHECKING:
    import argparse


def skill_command(args: argparse.Namespace, _parser: object = None) -> int:
    """List, read or run skills."""
    try:
        cli = optional(
            "stockade_skills.cli", distribution="stockade-skills", what="Agent Skills are"
        )
    except PluginError as error:
        return report_error(error, as_json=args.json)
    status: int = cli.main(args)
    return status
