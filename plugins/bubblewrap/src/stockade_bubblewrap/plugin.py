"""The entry point of stockade-bubblewrap: registers the ``bubblewrap`` sandbox provider."""

from __future__ import annotations

from collections.abc import Callable

from stockade import hookimpl
from stockade.confine.provider import SandboxProvider


@hookimpl
def stockade_register_sandboxes(register: Callable[[type[SandboxProvider]], None]) -> None:
    """Register :class:`~stockade_bubblewrap.provider.BubblewrapSandbox` as ``bubblewrap``."""
    from .provider import BubblewrapSandbox

    register(BubblewrapSandbox)
