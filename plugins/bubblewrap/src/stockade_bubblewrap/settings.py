"""The provider's settings (``[plugins.settings.bubblewrap]``), checked strictly.

A loose reading here would weaken the sandbox silently: the string ``"false"`` is true in
Python, and a string where a list belongs iterates as one-character paths. So every value
must have its exact type, paths must be absolute (``~`` is expanded), and an unknown key is
an error that lists the known ones.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from attrs import frozen

from stockade.errors import ConfigError
from stockade.protected import DEFAULT_SCAN_LIMIT

_PREFIX = "plugins.settings.bubblewrap"


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
    """

    writable_roots: tuple[str, ...] = ()
    deny_read: tuple[str, ...] = ()
    scan_limit: int = DEFAULT_SCAN_LIMIT
    seccomp_cache: str | None = None
    unix_sockets: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> Settings:
        """Check ``options`` and build the settings.

        Raises:
            ConfigError: naming every bad key, what it must be, and what it was.
        """
        problems = [
            f"{_PREFIX}.{key}: unknown setting (known: {', '.join(_CHECKS)})"
            for key in options
            if key not in _CHECKS
        ]
        values: dict[str, Any] = {}
        for key, check in _CHECKS.items():
            if key in options:
                value = check(key, options[key], problems)
                if value is not None:
                    values[key] = value
        if problems:
            raise ConfigError(
                "; ".join(problems),
                hint="fix these keys in the config file's [plugins.settings.bubblewrap] table",
                details={"problems": problems},
            )
        if "writable_roots" in values:  # compare and bind what the paths really are
            values["writable_roots"] = tuple(os.path.realpath(p) for p in values["writable_roots"])
        return cls(**values)


def _limit(key: str, value: object, problems: list[str]) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problems.append(f"{_PREFIX}.{key}: must be a whole number >= 1, got {value!r}")
        return None
    return value


def _flag(key: str, value: object, problems: list[str]) -> bool | None:
    if not isinstance(value, bool):
        problems.append(f"{_PREFIX}.{key}: must be true or false, got {value!r}")
        return None
    return value


def _cache(key: str, value: object, problems: list[str]) -> str | None:
    return "" if value == "" else _path(key, value, problems)


def _paths(key: str, value: object, problems: list[str]) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        problems.append(f"{_PREFIX}.{key}: must be a list of absolute paths, got {value!r}")
        return ()
    paths = [_path(f"{key}[{i}]", item, problems) for i, item in enumerate(value)]
    return tuple(p for p in paths if p is not None)


def _path(key: str, value: object, problems: list[str]) -> str | None:
    if not isinstance(value, str) or not value:
        problems.append(f"{_PREFIX}.{key}: must be a path, got {value!r}")
        return None
    path = os.path.expanduser(value)
    if not os.path.isabs(path):
        problems.append(f"{_PREFIX}.{key}: must be absolute (or start with ~), got {value!r}")
        return None
    return os.path.normpath(path)


_CHECKS: dict[str, Callable[[str, object, list[str]], object]] = {
    "writable_roots": _paths,
    "deny_read": _paths,
    "scan_limit": _limit,
    "seccomp_cache": _cache,
    "unix_sockets": _flag,
}
