"""``stockade ui``: the run page on loopback, from the optional ``stockade-ui`` distribution."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import PluginError, StockadeError
from .common import report_error

if TYPE_CHECKING:
    import argparse


def ui_command(args: argparse.Namespace, _parser: object = None) -> int:
    """Serve the run page until interrupted; a browser opens only where there is a display
    and ``--no-open`` was not given (the URL is printed either way)."""
    try:
        from stockade_ui.server import main, wants_browser
    except ImportError as error:
        missing = getattr(error, "name", None) or "stockade_ui"
        return report_error(
            PluginError(
                f"the run page is not installed ({missing} cannot be imported)",
                hint="install the stockade-ui distribution (it brings starlette, uvicorn and "
                "jinja2): `pip install stockade-ui`, or `uv sync` in the Stockade workspace",
                details={"missing": missing},
            ),
            as_json=False,
        )
    try:
        status: int = main(
            config=args.config,
            port=args.port,
            open_browser=not args.no_open and wants_browser(os.environ),
        )
    except StockadeError as error:
        return report_error(error, as_json=False)
    return status
