"""Checking a plugin's settings table strictly: exact types, absolute paths, every problem.

A loose reading of a sandbox's settings would weaken it silently: the string ``"false"`` is
true in Python, and a string where a list belongs iterates as one-character paths. So each
value must have its exact type, paths must be absolute (a leading ``~`` is expanded), an
unknown key is an error listing the known ones, and every problem is named at once in one
:class:`~stockade.errors.ConfigError`, by its full key (``plugins.settings.NAME.KEY``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from .. import resolved
from ..errors import ConfigError

Check = Callable[[str, object, list[str]], object]
"""``check(key, value, problems)``: the value to keep, or ``None`` after noting a problem."""


def parse(plugin: str, options: Mapping[str, Any], checks: Mapping[str, Check]) -> dict[str, Any]:
    """The checked values of ``options`` for ``plugin``, by key.

    Raises:
        ConfigError: naming every bad or unknown key, what it must be, and what it was.
    """
    prefix = f"plugins.settings.{plugin}"
    problems = [
        f"{prefix}.{key}: unknown setting (known: {', '.join(checks)})"
        for key in options
        if key not in checks
    ]
    values: dict[str, Any] = {}
    for key, check in checks.items():
        if key in options:
            value = check(f"{prefix}.{key}", options[key], problems)
            if value is not None:
                values[key] = value
    if problems:
        raise ConfigError(
            "; ".join(problems),
            hint=f"fix these keys in the config file's [{prefix}] table",
            details={"problems": problems},
        )
    return values


def whole(key: str, value: object, problems: list[str]) -> int | None:
    """A whole number of at least 1 (``true`` is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problems.append(f"{key}: must be a whole number >= 1, got {value!r}")
        return None
    return value


def hours(key: str, value: object, problems: list[str]) -> float | None:
    """A number of hours, 0 or more."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        problems.append(f"{key}: must be a number of hours >= 0, got {value!r}")
        return None
    return float(value)


def flag(key: str, value: object, problems: list[str]) -> bool | None:
    """``true`` or ``false``, nothing else."""
    if not isinstance(value, bool):
        problems.append(f"{key}: must be true or false, got {value!r}")
        return None
    return value


def path(key: str, value: object, problems: list[str]) -> str | None:
    """An absolute path (``~`` expanded), normalised."""
    if not isinstance(value, str) or not value:
        problems.append(f"{key}: must be a path, got {value!r}")
        return None
    expanded = os.path.expanduser(value)
    if not os.path.isabs(expanded):
        problems.append(f"{key}: must be absolute (or start with ~), got {value!r}")
        return None
    return os.path.normpath(expanded)


def path_or_off(key: str, value: object, problems: list[str]) -> str | None:
    """A path, or ``""`` for "none"."""
    return "" if value == "" else path(key, value, problems)


def paths(key: str, value: object, problems: list[str]) -> tuple[str, ...]:
    """A list of absolute paths."""
    if not isinstance(value, (list, tuple)):
        problems.append(f"{key}: must be a list of absolute paths, got {value!r}")
        return ()
    found = [path(f"{key}[{i}]", item, problems) for i, item in enumerate(value)]
    return tuple(p for p in found if p is not None)


def real_dirs(key: str, value: object, problems: list[str]) -> tuple[str, ...]:
    """A list of absolute paths, resolved (``realpath``): what writable roots really are."""
    return tuple(resolved.realpath(p) for p in paths(key, value, problems))
