"""Stockade: run an agent's commands by argv, classified, approved, confined, bounded, recorded.

Plugins import :data:`hookimpl` from here; everything else is imported from its own module
(``stockade.host``, ``stockade.request.spec``, ...) so that importing the package stays cheap.
"""

from __future__ import annotations

import pluggy

NAME = "stockade"
"""The one name: hook marker project, plugin-manager name and entry-point group."""

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker(NAME)
"""Mark a function as an implementation of a ``stockade_*`` hook."""

__all__ = ["NAME", "__version__", "hookimpl"]
