"""A folder that becomes a git repository by what it holds, kept as a ``.git`` the command made.

Git takes any folder holding ``HEAD``, ``objects/`` and ``refs/`` (or ``HEAD`` and
``commondir``, a worktree's) for a repository (``is_git_directory``, the ``GIT_DIR``
discovery), whatever its name: ``git init --bare x.git``, ``git clone --bare`` and the same
names written by hand all make one. Its ``hooks`` run for whoever uses it, so it gets the
treatment of a ``.git`` the command makes (:class:`~.rules.Fresh`):

- the name that completes it (the last of those markers, made by any call) is refused
  (``EROFS``) unless the folder's ``hooks`` is absent or holds only ``*.sample`` files;
- from then on its ``hooks`` takes only new ``*.sample`` files, and the name ``hooks`` in it
  only an empty folder (``mkdir``): no rename, link or symlink brings hooks in.

The repository is known by its folder's identity (device and inode), not its path, so a
rename of it or of a folder above it changes nothing. The host quarantines it after the run.
Its ``config`` stays the command's, as a fresh ``.git``'s (``protected-never-visible`` is
pinned for both). Names are compared without case: on a case-folding folder ``head`` is
``HEAD`` to git.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from typing import Literal

MARKERS = ("head", "objects", "refs", "commondir")
HOOKS = "hooks"
SAMPLE = ".sample"
_EXACT = {"head": "HEAD"}
How = Literal["file", "mkdir", "node", "symlink", "link", "rename"]


class Repositories:
    """The folders that became repositories during the run (by identity)."""

    def __init__(self) -> None:
        self._made: set[tuple[int, int]] = set()
        self._lock = threading.Lock()

    def refuses(self, folder: int, name: bytes, how: How) -> bool:
        """Whether the new name ``name`` may not be made in ``folder`` (opened) by
        ``how``; a name that completes a repository (allowed) makes the folder one."""
        text = os.fsdecode(name.rstrip(b"/")).lower()
        if not self._made and text not in MARKERS:
            return False  # the hot path: no repository yet, no marker
        info = os.fstat(folder)
        here = (info.st_dev, info.st_ino)
        with self._lock:
            made = set(self._made)
        if here in made:
            return text == HOOKS and how != "mkdir"
        if made and _hooks_of(folder, here, made):
            return not (how == "file" and text.endswith(SAMPLE))
        if text in MARKERS and _completes(folder, text):
            if not _inert(folder):
                return True
            with self._lock:
                self._made.add(here)
        return False


def _hooks_of(folder: int, here: tuple[int, int], made: set[tuple[int, int]]) -> bool:
    """Whether ``folder`` is the ``hooks`` of a repository in ``made``."""
    try:
        parent = os.open("..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return False
    try:
        above = os.fstat(parent)
        if (above.st_dev, above.st_ino) not in made:
            return False
        hooks = os.stat(HOOKS, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return False
    finally:
        os.close(parent)
    return (hooks.st_dev, hooks.st_ino) == here


def _completes(folder: int, making: str) -> bool:
    """Whether ``folder`` holds a repository once ``making`` (a marker) is made in it."""
    have = {making}
    for marker in MARKERS:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            os.lstat(_EXACT.get(marker, marker), dir_fd=folder)
            have.add(marker)
    return "head" in have and ({"objects", "refs"} <= have or "commondir" in have)


def _inert(folder: int) -> bool:
    """Whether ``folder``'s ``hooks`` is absent, or a folder of ``*.sample`` files only."""
    try:
        info = os.stat(HOOKS, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return True
    if not stat.S_ISDIR(info.st_mode):
        return False
    fd = os.open(HOOKS, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    try:
        with os.scandir(fd) as entries:
            return all(_sample(entry) for entry in entries)
    finally:
        os.close(fd)


def _sample(entry: os.DirEntry[str]) -> bool:
    return entry.name.endswith(SAMPLE) and entry.is_file(follow_symlinks=False)
