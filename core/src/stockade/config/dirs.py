"""Where Stockade keeps its state, from the environment alone (standard library only: the
command line's thin client reads it before anything else is imported)."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing's: the thin client imports this module
if TYPE_CHECKING:
    from collections.abc import Mapping


def state_dir(environ: Mapping[str, str]) -> str:
    """Stockade's directory under ``XDG_STATE_HOME`` (``~/.local/state`` by default)."""
    base = environ.get("XDG_STATE_HOME") or os.path.join(
        environ.get("HOME") or os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, "stockade")
