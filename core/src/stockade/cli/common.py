"""What the command groups share: building a host and reporting errors."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ..errors import StockadeError

if TYPE_CHECKING:
    import argparse

    from ..host import Host


def make_host(args: argparse.Namespace) -> Host:
    """A host from ``--config`` / ``STOCKADE_CONFIG`` / the XDG config and the environment."""
    from ..host import Host

    return Host.from_environment(args.config, environ=os.environ)


def report_error(error: StockadeError, *, as_json: bool) -> int:
    """Print ``error`` for a person (stderr) or a program (JSON on stdout); its exit status."""
    if as_json:
        import json

        print(json.dumps({"error": error.to_dict()}, indent=2, sort_keys=True))
    else:
        from ..display import visible

        print(f"stockade: error[{error.code}]: {visible(error.message)}", file=sys.stderr)
        if error.hint:
            print(f"  hint: {visible(error.hint)}", file=sys.stderr)
    return error.exit_status
