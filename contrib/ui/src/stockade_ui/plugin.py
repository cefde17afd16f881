"""The run page's plugin: the ``stockade ui`` command.

Every host imports this module (entry point ``ui``), so it imports next to nothing:
``stockade.frontends`` when the offer is asked for, the web stack when the command runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from stockade import hookimpl

if TYPE_CHECKING:
    import argparse

    from stockade.frontends import CliCommand, CliContext


def _arguments(parser: argparse.ArgumentParser, _cli: CliContext) -> None:
    """``--port`` and ``--no-open``."""
    parser.add_argument("--port", type=int, default=0, metavar="N", help="port (default: any free)")
    parser.add_argument("--no-open", action="store_true", help="do not open a browser")


def _handle(args: argparse.Namespace, cli: CliContext) -> int:
    """Serve the run page until interrupted; a browser opens only where there is a display
    and ``--no-open`` was not given (the URL is printed either way)."""
    from .server import main, wants_browser

    return main(
        config=cli.config_path,
        port=args.port,
        open_browser=not args.no_open and wants_browser(cli.environ),
        environ=cli.environ,
    )


@hookimpl
def stockade_cli_commands(add: Callable[[CliCommand], None]) -> None:
    """``stockade ui``."""
    from stockade.frontends import CliCommand

    add(
        CliCommand(
            "ui",
            "serve the run page on loopback",
            _arguments,
            _handle,
            description="Serve a local web view of runs, where a person lets held commands go "
            "ahead or declines them. Loopback only; the URL to open carries a per-start token.",
        )
    )
