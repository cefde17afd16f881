"""A path's real name (``os.path.realpath``) that a concurrent rename cannot make raise.

Before Python 3.13, ``os.path.realpath`` raises when a component it saw as a symbolic link
changed by the time it reads the link (it ``lstat``s, then ``readlink``s): gone
(``ENOENT``), no longer a link (``EINVAL``), a folder above it swapped for a file
(``ENOTDIR``) or for a link that loops (``ELOOP``). The host resolves paths of
workspaces that confined commands write while it checks them: a background task swapping a
folder for a link and back over and over made a classification raise mid-way. On those
errors :func:`realpath` resolves again, the tree as it is then. Every other error is the
answer (a magic link of another process's ``/proc`` entry that cannot be read:
``PermissionError``, which callers take for "cannot be known"), and so is the race's own
error where it wins every one of the tries: never a name left unresolved, which a check
could take for what it is not.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable

_TRIES = 50
_RACED = (errno.ENOENT, errno.EINVAL, errno.ENOTDIR, errno.ELOOP)


def realpath(path: str | os.PathLike[str]) -> str:
    """``path`` with every symbolic link resolved, made absolute (``os.path.realpath``).

    Raises:
        OSError: as ``os.path.realpath`` does (an unreadable link), or the race's error
            where a link swapped back and forth wins all the tries.
    """
    name = os.fspath(path)
    for _ in range(_TRIES - 1):
        try:
            return os.path.realpath(name)
        except OSError as error:
            if error.errno not in _RACED:
                raise
    return os.path.realpath(name)


def inside(path: str, roots: Iterable[str]) -> bool:
    """Whether ``path`` is one of ``roots`` or lies beneath one."""
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)
