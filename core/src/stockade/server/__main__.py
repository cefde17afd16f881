"""``python -m stockade.server``: the warm server, as the thin client starts it (detached)."""

from __future__ import annotations

import os

from .server import DEFAULT_IDLE, serve


def _idle() -> float:
    value = os.environ.get("STOCKADE_SERVER_IDLE", "")
    try:
        return float(value) if value else DEFAULT_IDLE
    except ValueError:
        return DEFAULT_IDLE


if __name__ == "__main__":
    raise SystemExit(serve(os.environ, idle=_idle(), warm=True))
