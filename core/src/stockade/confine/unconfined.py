"""Registers the ``none`` sandbox provider, the only one that may run ``danger-full-access``."""

from __future__ import annotations

from collections.abc import Callable

from .. import hookimpl
from .provider import SandboxProvider, Unconfined


@hookimpl
def stockade_register_sandboxes(register: Callable[[type[SandboxProvider]], None]) -> None:
    """Register :class:`~stockade.confine.provider.Unconfined` as ``none``."""
    register(Unconfined)
