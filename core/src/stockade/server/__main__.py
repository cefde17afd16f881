"""``python -m stockade.server``: the warm server, as the thin client starts it (detached)."""

from __future__ import annotations

import math
import os

from . import server
from .server import DEFAULT_IDLE, serve


def _idle() -> float:
    value = os.environ.get("STOCKADE_SERVER_IDLE", "")
    try:
        return float(value) if value else DEFAULT_IDLE
    except ValueError:
        return DEFAULT_IDLE


def _hello_timeout() -> float:
    # The tests' hook: a slow client is dropped sooner than the default (an unset, bad or
    # non-positive or infinite value keeps the default).
    try:
        value = float(os.environ.get("STOCKADE_SERVER_HELLO_TIMEOUT", ""))
    except ValueError:
        return server.HELLO_TIMEOUT
    return value if value > 0 and math.isfinite(value) else server.HELLO_TIMEOUT


if __name__ == "__main__":
    server.HELLO_TIMEOUT = _hello_timeout()
    raise SystemExit(serve(os.environ, idle=_idle(), warm=True))
