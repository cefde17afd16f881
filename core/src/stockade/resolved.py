"""A path's real name (``os.path.realpath``) that a concurrent rename cannot make raise.

Before Python 3.13, ``os.path.realpath`` raises ``FileNotFoundError`` (or ``OSError``) when
a component it saw as a symbolic link is gone, or no longer a link, by the time it reads the
link (it ``lstat``s, then ``readlink``s). The host resolves paths of workspaces that confined
commands write while it checks them: a background task swapping a folder for a link and
back over and over made a classification raise mid-way. Python 3.13 treats such a component
as a plain name; on older versions :func:`realpath` resolves again (the tree as it is then),
and where the swap keeps winning, returns the absolute name unresolved. Either answer is
the tree at some moment of the race; what a command then opens is decided by the kernel
(the sandbox), never by this name.
"""

from __future__ import annotations

import os

_TRIES = 50


def realpath(path: str | os.PathLike[str]) -> str:
    """``path`` with every symbolic link resolved, made absolute (``os.path.realpath``)."""
    name = os.fspath(path)
    for _ in range(_TRIES):
        try:
            return os.path.realpath(name)
        except OSError:
            continue
    return os.path.abspath(name)
