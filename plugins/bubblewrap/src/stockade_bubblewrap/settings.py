"""The provider's settings (``[plugins.settings.bubblewrap]``), checked strictly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attrs import frozen

from stockade.confine.protected import DEFAULT_SCAN_LIMIT
from stockade.plugin import settings as check

CHECKS: dict[str, check.Check] = {
    "writable_roots": check.real_dirs,
    "deny_read": check.paths,
    "scan_limit": check.whole,
    "seccomp_cache": check.path_or_off,
    "unix_sockets": check.flag,
    "layers": check.flag,
}


@frozen
class Settings:
    """The bubblewrap provider's settings.

    Attributes:
        writable_roots: more directories writable in ``workspace-write`` (resolved).
        deny_read: more paths masked (unreadable) in every mode.
        scan_limit: directories to scan for protected paths before refusing.
        seccomp_cache: where the compiled filter is cached; ``""`` keeps it in memory only;
            ``None`` means ``$XDG_CACHE_HOME/stockade/seccomp``.
        unix_sockets: allow ``socket(AF_UNIX)`` (``socketpair`` always works).
        layers: a ``workspace-write`` command writes into layers of its own, landed by the
            host after its checks (:mod:`stockade.layers`); ``false``: it writes directly.
    """

    writable_roots: tuple[str, ...] = ()
    deny_read: tuple[str, ...] = ()
    scan_limit: int = DEFAULT_SCAN_LIMIT
    seccomp_cache: str | None = None
    unix_sockets: bool = False
    layers: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> Settings:
        """Check ``options`` (see :mod:`stockade.plugin.settings`) and build the settings."""
        return cls(**check.parse("bubblewrap", options, CHECKS))
