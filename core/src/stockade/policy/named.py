"""What a command's argv names: the paths it may read, and whether one is private.

The breaker's older reading of a command (:func:`named`) is kept as an extra reason shown to
a person; it is not what decides whether a run holds private data. :func:`matches` is the one
reading of a profile's ``private`` globs, shared with the masks
(:mod:`stockade.policy.private`).

What "names a path" means: each argument (the program too), the value of an
``--option=value`` or ``name=value`` argument or a short option's glued one (``-Tfile``), and
what follows a first ``@`` or ``<`` (``curl -d @file``, ``-F f=<file``), taken relative to the
command's folder (``/proc/self/cwd`` and its like standing for that folder), ``..`` resolved by
its letters, and again with its symlinks resolved when it exists.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Iterator

from .. import resolved

_WILD = "*?["


def named(argv: Iterable[str], cwd: str) -> list[str]:
    """The paths a command names (see the module docstring), absolute and normalised: each
    as written, and again with its symlinks resolved when it exists."""
    found: dict[str, None] = {}
    for arg in argv:
        for written in _candidates(arg):
            # The command's /proc/self/cwd is its folder; the host's realpath would read its own.
            text = _PROC_CWD.sub(lambda _: cwd, written, count=1)
            path = os.path.normpath(os.path.join(cwd, text))
            found.setdefault(path, None)
            if os.path.lexists(path):
                found.setdefault(resolved.realpath(path), None)
    return list(found)


_PROC_CWD = re.compile(r"\A/+proc/+(?:self|thread-self|[0-9]+)(?:/+task/+[0-9]+)?/+cwd(?=/|\Z)")


def _candidates(arg: str) -> Iterator[str]:
    """``arg``, and the paths it may carry: an option's value (``--opt=value``, and a short
    option's glued one, ``-d@file``, ``-Tfile``), any ``name=value`` (``dd if=file``,
    ``curl -F name=@file``), and the text after a first ``@`` or ``<`` (a file to read)."""
    if not arg or "\0" in arg:
        return
    values = [arg]
    if arg.startswith("-") and not arg.startswith("--"):
        values.append(arg[2:])
    if "=" in arg:
        values.append(arg.partition("=")[2])
    for mark in "@<":
        if mark in arg:
            values.append(arg.partition(mark)[2])
    yield from dict.fromkeys(v for v in values if v)


def matches(
    path: str, relative: str | None, globs: Iterable[str], *, folders: bool = True
) -> str | None:
    """The first glob that makes reading ``path`` (absolute; ``relative`` to the workspace,
    ``None`` outside it, ``""`` the workspace itself) read something private: ``path`` is,
    or is inside, a match, or (with ``folders``) is a folder a match could be beneath."""
    for glob in globs:
        target = path if glob.startswith("/") else relative
        if target is None:
            continue
        parts = target.split("/")
        for end in range(len(parts), 0, -1):
            if fnmatch.fnmatchcase("/".join(parts[:end]), glob):
                return glob
        if folders and os.path.isdir(path) and beneath(target, glob):
            return glob
    return None


def beneath(folder: str, glob: str) -> bool:
    """Whether ``glob`` could match something beneath ``folder``: its letters before the
    first wildcard agree with the folder's path."""
    cut = min((i for i, c in enumerate(glob) if c in _WILD), default=len(glob))
    prefix, base = glob[:cut], (folder.rstrip("/") + "/" if folder not in ("", "/") else folder)
    return base.startswith(prefix) or prefix.startswith(base)


def relative_to(path: str, workspace: str) -> str | None:
    if path == workspace:
        return ""
    if path.startswith(workspace.rstrip("/") + "/"):
        return path[len(workspace.rstrip("/")) + 1 :]
    return None
