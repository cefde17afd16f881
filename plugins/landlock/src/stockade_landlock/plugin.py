"""The entry point of stockade-landlock: registers the ``landlock`` sandbox provider."""

from __future__ import annotations

from collections.abc import Callable

from stockade import hookimpl
from stockade.confine.provider import SandboxProvider


@hookimpl
def stockade_register_sandboxes(register: Callable[[type[SandboxProvider]], None]) -> None:
    """Register :class:`~stockade_landlock.provider.LandlockSandbox` as ``landlock``."""
    from .provider import LandlockSandbox

    register(LandlockSandbox)
