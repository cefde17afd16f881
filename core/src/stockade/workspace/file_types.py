"""The file tools' limits and the values they return (entries, listings, read and write results)."""

from __future__ import annotations

import os
from typing import Literal

from attrs import frozen

from ..confine import protected
from ..confine.protected import AGENT_CONFIG
from ..errors import UsageError

Kind = Literal["file", "dir", "symlink", "other"]

READ_LIMIT = 256 * 1024
"""The most bytes of text :meth:`Workspace.file_read` returns in one call."""
WRITE_LIMIT = 1024 * 1024
"""The largest file :meth:`Workspace.file_write` writes."""
LIST_LIMIT = 1000
SNIFF_BYTES = 8 * 1024
"""A file with a NUL byte or invalid UTF-8 in this many first bytes is binary."""
NAME_MAX = 255
MAX_SYMLINKS = 40  # the kernel's limit on links followed in one resolution
_PROTECTED = frozenset({".git"} | {name.lower() for name in AGENT_CONFIG})


def _refuse_masked(fd: int, shown: str) -> None:
    """Refuse a file that really lies in a credential store (found through symlinks too)."""
    real = os.readlink(f"/proc/self/fd/{fd}")
    if protected.enclosing(real) == "masked":
        raise UsageError(
            f"path {shown!r} is in a credential store: file_read never reads it",
            details={"path": shown, "rule": "masked"},
        )


_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_PATH_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


@frozen
class Entry:
    """One name in a directory: its kind as ``lstat`` sees it (no following) and its size."""

    name: str
    kind: Kind
    size: int
    """Bytes for a file, the target's length for a symlink, 0 for a directory."""


@frozen
class Listing:
    """A directory's entries, sorted by name; ``truncated`` when more were left off."""

    path: str
    entries: tuple[Entry, ...]
    truncated: bool


@frozen
class ReadResult:
    """Part of a file: its text, or a description when it is binary.

    ``offset`` and ``returned`` count bytes; ``truncated`` is true when bytes remain after
    ``offset + returned``. A binary file has ``text`` ``None``, ``returned`` 0, and a
    ``description`` naming its size, sha256 and a guess of its type.
    """

    path: str
    text: str | None
    binary: bool
    size: int
    offset: int
    returned: int
    truncated: bool
    description: str | None


@frozen
class WriteResult:
    """What a write changed: whether the file was created, its sizes and sha256 before and after.

    ``written_as`` is where the file is, relative to the workspace, as the folder descriptor
    the write held gives it (``/proc/self/fd``) right after the write: ``path`` unless a
    folder on the way was renamed meanwhile; ``None`` when that folder is no longer beneath
    the workspace (moved out, removed). The breaker marks this name, not ``path`` resolved
    again (:meth:`stockade.policy.breaker.Breaker.file_tool`).
    """

    path: str
    created: bool
    old_size: int | None
    new_size: int
    old_sha256: str | None
    new_sha256: str
    changed: bool
    written_as: str | None = None
