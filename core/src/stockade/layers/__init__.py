"""Layered workspaces: a command writes into a layer of its own, and the host lands it.

Under a provider that can mount an overlay (bubblewrap), each writable root of a command is
the real folder below and an upper folder of that command's own above
(:mod:`~stockade.layers.place`). Nothing the command writes reaches the real folder while it
runs; when it ends, however it ends, the host lands the layer through descriptors, applying
every rule on the way (:mod:`~stockade.layers.commit`), under a journal that lets a host
killed mid-commit finish it on its next start (:mod:`~stockade.layers.journal`).
"""

from __future__ import annotations

from .commit import Rules, Tally, land
from .journal import Recovery, recover
from .place import Layer, make
from .session import Landing, Session

__all__ = ["Landing", "Layer", "Recovery", "Rules", "Session", "Tally", "land", "make", "recover"]
