"""What a landing removes from the real root, and what it must leave there.

A layer deletes a real path three ways: a whiteout (the command removed it), an opaque
folder (the command removed a folder and made it again: what the root held there goes),
and a folder replaced by a file or the other way round. Each removes a whole tree of the
real root, which the command only ever saw as it was when it began. Anything in that tree
changed since then (a person's edit in place, a file they added, a repository they made:
the change time of the entry, or of a folder for what was added to or removed from it) is
a conflict, exactly as a file both changed is: the tree stays as it is, named in the
conflicts, and nothing of it is deleted. So does a tree that holds a protected name
(a ``.git`` made meanwhile): a protected path is never deleted, at any depth.

A tree is judged twice: where it stands, then again after it is renamed aside in its folder
(:data:`ASIDE`), where no one reaches it by its path any more. A change made while the first
judgement walked is in the moved tree and keeps it (it is renamed back); one made after the
rename cannot reach it by its path. What is left is a change made through a descriptor or a
working folder held in the tree, between the second judgement and its removal. A rename
changes the moved entry's own change time, so the moved top is judged by its modification
time (what a folder's entries, or a file's bytes, change). In a fork mounted as an overlay,
a tree is judged once, where it stands, as before: renaming a file of the fork's snapshot
would copy it up whole, and the kernel refuses to rename a folder of it (``EXDEV``, without
``redirect_dir``).

Trees are walked without recursion (a stack of paths, a folder's entries listed once), so
a tree of any depth is judged, and listed for the tally, in bounded memory per level.
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import stat
import struct
from collections.abc import Iterator

from ..confine import protected
from ..trees import remove_at
from .rules import Rules, Tally

ASIDE = ".stockade-clearing-"
"""The start of the name a tree is renamed to before its second judgement."""

RENAME_NOREPLACE = 1
OVERLAY = 0x794C7630
"""The overlay file system's magic number (``f_type``)."""


def changed_since(below: os.stat_result, since: int) -> bool:
    """Whether a real entry changed since the command started (its change time is later),
    other than a fork's file that only gained or lost a link: a fork's files are hard
    links shared with its snapshot and siblings, never written in place, so making or
    removing another fork changes their change time and nothing else."""
    if below.st_ctime_ns <= since:
        return False
    linked = stat.S_ISREG(below.st_mode) and below.st_nlink > 1
    return not (linked and below.st_mtime_ns <= since)


def walk(
    dst: int, name: str, target: str, *, strict: bool = False
) -> Iterator[tuple[str, os.stat_result]]:
    """``name`` in folder ``dst`` (at ``target``) and everything beneath it, each with its
    own ``lstat``, folders before what they hold; symlinks are not followed. ``strict``: a
    folder that cannot be listed (gone or renamed meanwhile, a path past ``PATH_MAX``)
    raises, never passes unjudged."""
    try:
        top = os.stat(name, dir_fd=dst, follow_symlinks=False)
    except FileNotFoundError:
        return
    yield target, top
    if not stat.S_ISDIR(top.st_mode):
        return
    base = f"/proc/self/fd/{dst}/"
    stack = [name]
    while stack:
        relative = stack.pop()
        try:
            with os.scandir(base + relative) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            if strict:
                raise
            continue  # gone or swapped meanwhile (a listing only: nothing is judged by it)
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                if strict:
                    raise
                continue
            inner = f"{relative}/{entry.name}"
            yield os.path.join(target, inner[len(name) + 1 :]), info
            if stat.S_ISDIR(info.st_mode):
                stack.append(inner)


Found = list[tuple[str, os.stat_result]]
"""A real tree as :func:`walk` gives it: each path with its own ``lstat``."""


def kept_by(dst: int, name: str, target: str, rules: Rules) -> tuple[str, str] | None:
    """Why the real tree ``name`` in ``dst`` may not be deleted: ``("protected", PATH)``
    or ``("changed", PATH)`` for the first such path in it (a folder that cannot be
    listed, gone or renamed meanwhile or too deep for a path, counts as changed: what it
    holds could not be judged), or ``None``."""
    return judged(dst, name, target, rules)[0]


def judged(
    dst: int, name: str, target: str, rules: Rules, *, moved: bool = False
) -> tuple[tuple[str, str] | None, Found]:
    """:func:`kept_by`'s verdict, and the tree as it was judged (whole when nothing keeps
    it): one walk serves the judgement and the list of what goes. ``moved``: ``name`` was
    renamed aside, so its own change time is the rename's and its modification time says
    whether it changed."""
    found: Found = []
    path = target
    try:
        for path, info in walk(dst, name, target, strict=True):
            if protected.kind_of(path, rules.dotfiles) is not None:
                return ("protected", path), found
            if rules.since and (
                info.st_mtime_ns > rules.since
                if moved and not found
                else changed_since(info, rules.since)
            ):
                return ("changed", path), found
            found.append((path, info))
    except OSError:
        return ("changed", path), found
    return None, found


def note(target: str, kept: tuple[str, str], tally: Tally) -> None:
    """Name in ``tally`` why the real ``target`` stays (:func:`kept_by`'s verdict): a
    conflict, or a protected path not deleted."""
    why, path = kept
    if why == "changed":
        tally.conflicts.append(target)
        tally.failed.append(f"{target}: not deleted: {path} changed since the command began")
    elif path == target:
        tally.failed.append(f"{target}: a protected path is not deleted")
    else:
        tally.failed.append(f"{target}: not deleted: it holds the protected path {path}")


def listed(found: Found) -> list[str]:
    """A judged tree's paths as a tally lists them (folders with a ``/``), in order."""
    return sorted(p + "/" if stat.S_ISDIR(i.st_mode) else p for p, i in found)


def remove_unless(dst: int, name: str, target: str, rules: Rules, tally: Tally) -> bool:
    """Remove ``name`` in ``dst`` (a tree whole), unless :func:`kept_by` keeps it, where it
    stands or once renamed aside (the module's docstring): then it is named (:func:`note`)
    and stays. Whether it went.

    Raises:
        OSError: it could not be moved aside, or removed where it stands.
    """
    kept, found = judged(dst, name, target, rules)
    aside = ""
    if kept is None and found and not _on_overlay(dst):
        moved = _move_aside(dst, name)
        if moved is None:
            return True  # gone meanwhile
        aside = moved
    if aside:
        first = found[0][1]
        kept, found = judged(dst, aside, target, rules, moved=True)
        if kept is None and found and not _same(first, found[0][1]):
            kept = ("changed", target)  # another entry was moved in under its name
        if kept is not None:
            _put_back(dst, aside, name, target, tally)
    if kept is not None:
        note(target, kept, tally)
        return False
    if not found:
        return True  # gone already
    try:
        if not stat.S_ISDIR(found[0][1].st_mode):
            os.unlink(aside or name, dir_fd=dst)
            tally.deleted.append(target)
            return True
        remove_at(dst, aside or name)  # by descriptors, never following a link, however deep
    except OSError as error:
        if not aside:
            raise
        # What could not be removed goes back to its name, or says where it is.
        _put_back(dst, aside, name, target, tally, partly=error.strerror or str(error))
        return False
    tally.deleted.extend(p + "/" if stat.S_ISDIR(i.st_mode) else p for p, i in found[:0:-1])
    tally.deleted.append(target + "/")
    return True


def _move_aside(dst: int, name: str) -> str | None:
    """Rename ``name`` in ``dst`` to a new :data:`ASIDE` name; that name (``""``: it cannot
    be renamed, a fork's folder from its snapshot; ``None``: it is gone)."""
    aside = ASIDE + secrets.token_hex(8)
    try:
        os.rename(name, aside, src_dir_fd=dst, dst_dir_fd=dst)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
        return ""
    return aside


def _same(before: os.stat_result, now: os.stat_result) -> bool:
    """Whether an entry looked at twice is the same, unchanged but for its change time (a
    rename's): not another moved in under its name, nor one whose mode or owner changed."""
    keys = ("st_dev", "st_ino", "st_mode", "st_uid", "st_gid", "st_size", "st_mtime_ns")
    return all(getattr(before, k) == getattr(now, k) for k in keys)


def _on_overlay(fd: int) -> bool:
    """Whether folder ``fd`` is on an overlay (a fork mounted on the host): renaming there
    copies a file of the snapshot up whole, and a folder of it cannot be renamed."""
    found = ctypes.create_string_buffer(512)  # a struct statfs, its f_type first
    if ctypes.CDLL(None, use_errno=True).fstatfs(fd, found) != 0:
        return False
    kind: int = struct.unpack_from("=L", found.raw)[0]
    return kind == OVERLAY


def _put_back(
    dst: int, aside: str, name: str, target: str, tally: Tally, *, partly: str = ""
) -> None:
    """Rename a kept tree back to its name, never over what was made there meanwhile
    (then it stays aside, and ``failed`` says where). ``partly``: why removing it stopped
    part-way (``failed`` says so, and where what is left stays)."""
    libc = ctypes.CDLL(None, use_errno=True)
    flags = ctypes.c_uint(RENAME_NOREPLACE)
    back = libc.renameat2(dst, aside.encode(), dst, name.encode(), flags) == 0
    code = 0 if back else ctypes.get_errno()
    where = os.path.join(os.path.dirname(target), aside)
    why = "a new one was made there meanwhile" if code == errno.EEXIST else os.strerror(code)
    if partly:
        rest = "what is left stays" if back else f"what is left is at {where} ({why})"
        tally.failed.append(f"{target}: partly deleted ({partly}); {rest}")
    elif not back:
        tally.failed.append(f"{target}: kept as {where}: not put back ({why})")


def empty(dst: int, target: str, rules: Rules, tally: Tally) -> bool:
    """An opaque folder: what the root held in folder ``dst`` (at ``target``) goes, but
    what :func:`remove_unless` keeps; whether it is empty now."""
    emptied = True
    for name in sorted(os.listdir(dst)):
        path = os.path.join(target, name)
        try:
            emptied &= remove_unless(dst, name, path, rules, tally)
        except OSError as error:  # not moved aside, or not removed: it stays, and is named
            tally.failed.append(f"{path}: not deleted: {error.strerror or error}")
            emptied = False
    return emptied
