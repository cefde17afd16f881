"""The entry point of stockade-unshare: registers the ``unshare`` sandbox provider."""

from __future__ import annotations

from collections.abc import Callable

from stockade import hookimpl
from stockade.confine.provider import SandboxProvider


@hookimpl
def stockade_register_sandboxes(register: Callable[[type[SandboxProvider]], None]) -> None:
    """Register :class:`~stockade_unshare.provider.UnshareSandbox` as ``unshare``."""
    from .provider import UnshareSandbox

    register(UnshareSandbox)
