"""Converters and validators shared by the request values (attrs converters and validators)."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs

from .literals import DOTFILES, KINDS


def _frozen_map(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


def _argv(value: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError("argv must be a sequence of strings, not one string: no shell parses it")
    return tuple(value)


def _check_argv(_inst: object, _attr: object, value: tuple[str, ...]) -> None:
    if not value:
        raise ValueError("argv is empty: name a program")
    for arg in value:
        if not isinstance(arg, str):
            raise TypeError(f"argv items must be strings, got {type(arg).__name__}")
        if "\0" in arg:
            raise ValueError("argv items cannot contain NUL bytes")
    if not value[0]:
        raise ValueError("argv[0] is empty: name a program")


def _paths(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError("grant_writable takes a list of folders, not one string")
    return tuple(value)


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _ints(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(value)


def _one_of(choices: tuple[str, ...]) -> Callable[[Any, Any, Any], None]:
    def check(_inst: object, attr: object, value: str | None) -> None:
        if value is not None and value not in choices:
            name = getattr(attr, "name", "value")
            raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")

    return check


def _positive(_instance: object, attr: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{attr.name} must be a whole number >= 1, got {value!r}")


def _kinds(_inst: object, attr: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    for kind in value:
        if kind not in KINDS:
            raise ValueError(f"{attr.name} takes classes from {', '.join(KINDS)}; got {kind!r}")


def _dotfiles(_inst: object, attr: attrs.Attribute[Any], value: tuple[str, ...]) -> None:

    for name in value:
        if name != "*" and name not in DOTFILES:
            raise ValueError(
                f"{attr.name} takes protected dotfiles ({', '.join(sorted(DOTFILES))}) or "
                f"'*'; got {name!r}"
            )


def _private_globs(_inst: object, attr: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    for glob in value:
        if not isinstance(glob, str) or not glob.strip() or "\0" in glob:
            raise ValueError(
                f"{attr.name} takes globs of paths (relative to the workspace, or absolute), "
                f"such as 'secrets/*' or '*.pem'; got {glob!r}"
            )
        if posixpath.normpath(glob) != glob:  # the paths it is compared with are normalised
            raise ValueError(
                f"{attr.name}: the glob {glob!r} is not normalised (a trailing or doubled '/', "
                f"'.' or '..') and would match nothing; write {posixpath.normpath(glob)!r}"
            )


def _positive_number(
    _inst: object, attr: attrs.Attribute[float | None], value: float | None
) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{attr.name} must be greater than 0, got {value!r}")
