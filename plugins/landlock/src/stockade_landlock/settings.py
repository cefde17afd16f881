"""The provider's settings (``[plugins.settings.landlock]``), checked strictly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attrs import frozen

from stockade.confine.protected import DEFAULT_SCAN_LIMIT, DEFAULT_SNAPSHOT_LIMIT_MB
from stockade.plugin import settings as check

CHECKS: dict[str, check.Check] = {
    "writable_roots": check.real_dirs,
    "deny_read": check.paths,
    "scan_limit": check.whole,
    "seccomp_cache": check.path_or_off,
    "unix_sockets": check.flag,
    "accept_partial": check.flag,
    "max_abi": check.whole,
    "snapshot_limit_mb": check.whole,
    "supervise": check.flag,
}


@frozen
class Settings:
    """The Landlock provider's settings.

    Attributes:
        writable_roots: more directories writable in ``workspace-write`` (resolved).
        deny_read: more paths made unreadable in every mode.
        scan_limit: directories to scan for protected paths before refusing.
        seccomp_cache: where the compiled filter is cached; ``""`` keeps it in memory only;
            ``None`` means ``$XDG_CACHE_HOME/stockade/seccomp``.
        unix_sockets: allow ``socket(AF_UNIX)`` (``socketpair`` always works). Landlock
            does not govern connecting to a pathname socket, so with this on, every host
            socket the user may open is reachable.
        accept_partial: run even when the kernel's ABI cannot enforce everything (the
            result then says ``enforcement: partial`` and what is missing).
        max_abi: use at most this Landlock ABI (to try an older kernel's behaviour).
        snapshot_limit_mb: MiB the protected paths of the writable roots (``.git`` less
            its objects, agent config, dotfiles) may hold: they are read before each run
            and put back after it; past this the run is refused.
        supervise: keep the protected paths read-only while the command runs (the
            supervisor), where the kernel allows; off, they are put back after it.
    """

    writable_roots: tuple[str, ...] = ()
    deny_read: tuple[str, ...] = ()
    scan_limit: int = DEFAULT_SCAN_LIMIT
    seccomp_cache: str | None = None
    unix_sockets: bool = False
    accept_partial: bool = False
    max_abi: int | None = None
    snapshot_limit_mb: int = DEFAULT_SNAPSHOT_LIMIT_MB
    supervise: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> Settings:
        """Check ``options`` (see :mod:`stockade.plugin.settings`) and build the settings."""
        return cls(**check.parse("landlock", options, CHECKS))
