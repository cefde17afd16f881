"""What the command groups share: building a host and reporting errors."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..errors import StockadeError

if TYPE_CHECKING:
    import argparse

    from ..host import Host


def make_host(args: argparse.Namespace) -> Host:
    """A host from ``--config`` / ``STOCKADE_CONFIG`` / the XDG config and the environment;
    inside the server, a run of its own on a warm host, for the caller's environment."""
    from ..caller import current

    caller = current()
    if caller is not None:
        return caller.host(args.config)
    from ..host import Host

    return Host.from_environment(args.config, environ=os.environ)


@contextlib.contextmanager
def interrupts(stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` on SIGINT, SIGTERM or SIGHUP of this process, or, inside the server,
    when the caller is interrupted (its Ctrl-C, or it went away)."""
    from ..caller import current

    caller = current()
    if caller is not None:
        remove = caller.on_interrupt(stop)
        try:
            yield
        finally:
            remove()
        return
    import signal

    previous = {
        sig: signal.signal(sig, lambda *_: stop())
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
