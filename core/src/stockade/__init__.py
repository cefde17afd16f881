"""Stockade: run an agent's commands by argv, classified, approved, confined, bounded, recorded.

Plugins import :data:`hookimpl` from here; everything else is imported from its own module
(``stockade.host``, ``stockade.request.spec``, ...) so that importing the package stays cheap:
the package itself imports only the standard library (pluggy is imported when a plugin first
asks for :data:`hookimpl`), which keeps the command line's thin client free of it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs the thin client ~15 ms

NAME = "stockade"
"""The one name: hook marker project, plugin-manager name and entry-point group."""

__version__ = "0.1.0"

if TYPE_CHECKING:
    import pluggy

    hookimpl: pluggy.HookimplMarker
    """Mark a function as an implementation of a ``stockade_*`` hook."""


def __getattr__(name: str) -> object:
    if name == "hookimpl":
        import pluggy

        marker = pluggy.HookimplMarker(NAME)
        globals()["hookimpl"] = marker
        return marker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["NAME", "__version__", "hookimpl"]
