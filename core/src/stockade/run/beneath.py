"""The host's own file operations inside a writable root, through folder descriptors.

After a run the host moves new protected names into the quarantine and puts protected
paths back (:mod:`stockade.run.guard`, :mod:`stockade.run.snapshot`). It does so
unconfined, as the user, on paths a command could change: a folder of the workspace may
have been swapped for a symlink (by the command itself, or by a background task still
running) between the moment the host listed it and the moment it acts. An operation by
path would then follow the link and move, overwrite or chmod a file outside the workspace
(``~/.bashrc``).

So every operation here starts at the writable root and opens each folder on the way with
``O_PATH | O_DIRECTORY | O_NOFOLLOW``, then acts on the last name relative to that
descriptor, never following it either. A component that is a symlink (or no longer a
folder) raises :class:`Swapped`, which the callers record as a path left alone. The walk
is hand-written because the standard library offers no descriptor walk from a root, and
``openat2(RESOLVE_NO_SYMLINKS)`` is not on every kernel the host runs on; per component
``O_NOFOLLOW`` gives the same guarantee on all of them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Iterable, Iterator

from .. import owned
from ..tree_copy import copy_tree
from ..trees import remove_at

_WALK = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEED = stat.S_IRUSR | stat.S_IWUSR | stat.S_IXUSR


class Swapped(OSError):
    """A folder on the way to a path is a symlink, or is no longer a folder: the host
    leaves the path alone rather than act outside the workspace."""


def root_of(path: str, roots: Iterable[str]) -> str | None:
    """The innermost of ``roots`` that holds ``path`` (``None``: none does)."""
    best: str | None = None
    for root in roots:
        under = path == root or path.startswith(root.rstrip("/") + "/")
        if under and (best is None or len(root) > len(best)):
            best = root
    return best


def _proc(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


def _give_back(fd: int) -> None:
    """Give a folder of this user (held by ``fd``) back the rights the host needs in it."""
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and info.st_mode & _NEED != _NEED:
        with contextlib.suppress(OSError):
            os.chmod(_proc(fd), stat.S_IMODE(info.st_mode) | _NEED)


def _step(fd: int, name: str, path: str, *, make: bool) -> int:
    """Open folder ``name`` inside ``fd`` without following it (made 0700 when missing
    and ``make``)."""
    for _ in range(3):
        try:
            return os.open(name, _WALK, dir_fd=fd)
        except FileNotFoundError:
            if not make:
                raise
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=fd)
        except PermissionError:
            _give_back(fd)  # a command took the search right away to hide what it planted
        except OSError as error:
            if error.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            raise Swapped(
                errno.ELOOP,
                "a folder on the way is a symlink or no longer a folder; left alone",
                path,
            ) from None
    return os.open(name, _WALK, dir_fd=fd)


@contextlib.contextmanager
def parent(path: str, roots: Iterable[str], *, make: bool = False) -> Iterator[tuple[int, str]]:
    """A descriptor of the folder holding ``path``, opened from its root without following a
    link, and ``path``'s last name.

    Raises:
        Swapped: a folder on the way is a symlink or not a folder.
        FileNotFoundError: one is missing (made instead when ``make``).
        OSError: ``path`` is under none of ``roots``. (A root itself is reached from its
            parent, which is outside every root.)
    """
    root = root_of(path, roots)
    if root is None:
        raise OSError(errno.EXDEV, "not inside a writable root", path)
    if path == root:  # a root inside a protected path: its parent is the host's own
        root, parts = os.path.dirname(root), [os.path.basename(root)]
    else:
        parts = path[len(root.rstrip("/")) + 1 :].split("/")
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts[:-1]:
            if name in ("", ".", ".."):
                raise OSError(errno.EINVAL, "not a normalised path", path)
            following = _step(fd, name, path, make=make)
            os.close(fd)
            fd = following
        yield fd, parts[-1]
    finally:
        os.close(fd)


def lstat(path: str, roots: Iterable[str]) -> os.stat_result:
    """``path``'s own status, reached without following a link.

    Raises:
        Swapped: a folder on the way is a symlink or not a folder.
        FileNotFoundError: it (or a folder on the way) does not exist.
    """
    with parent(path, roots) as (fd, name):
        return os.stat(name, dir_fd=fd, follow_symlinks=False)


def exists(path: str, roots: Iterable[str]) -> bool:
    """Whether ``path`` exists (as a link too) on a way without links.

    Raises:
        Swapped: a folder on the way is a symlink or not a folder.
    """
    try:
        lstat(path, roots)
    except Swapped:
        raise
    except OSError:
        return False
    return True


def chmod(path: str, mode: int, roots: Iterable[str]) -> None:
    """Set ``path``'s mode; a symlink is left as it is."""
    with parent(path, roots) as (fd, name):
        own = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        try:
            if not stat.S_ISLNK(os.fstat(own).st_mode):
                os.chmod(_proc(own), mode)
        finally:
            os.close(own)


def openable(directory: str, roots: Iterable[str]) -> None:
    """Give a folder of this user back the rights the host needs to list and move in it (a
    command may have taken them away to hide what it planted). Nothing when it is gone,
    is a link, or lies beyond a link."""
    try:
        if root_of(directory, roots) == directory:
            fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                _give_back(fd)
            finally:
                os.close(fd)
            return
        with parent(directory, roots) as (at, name):
            fd = os.open(name, _WALK, dir_fd=at)
            try:
                _give_back(fd)
            finally:
                os.close(fd)
    except OSError:
        return


def move(path: str, folder: str, roots: Iterable[str], moved: list[str], failed: list[str]) -> bool:
    """Move ``path`` (reached and taken without following a link) to ``folder`` + its
    absolute path. ``False`` (and the reason in ``failed``) when a folder on the way is a
    link: nothing is moved or removed then."""
    target = os.path.join(folder, path.lstrip("/"))
    try:
        openable(os.path.dirname(path), roots)
        openable(path, roots)
        with parent(path, roots) as (fd, name):
            owned.private(folder)
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            while os.path.lexists(target):
                target += "~"
            try:
                os.rename(name, target, src_dir_fd=fd)
            except OSError as error:
                if error.errno != errno.EXDEV:  # another filesystem: copy then remove
                    raise
                _copy(fd, name, target)
                _remove(fd, name)
    except Swapped as error:
        failed.append(f"{path}: {error.strerror}")
        return False
    except OSError as error:
        failed.append(f"{path}: {error.strerror}")
        with contextlib.suppress(OSError), parent(path, roots) as (fd, name):
            try:
                _remove(fd, name)
            except OSError as gone:
                failed.append(f"{path}: not removed either: {gone.strerror}")
        return False
    moved.append(path)
    return True


def _copy(fd: int, name: str, target: str) -> None:
    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
    source = os.path.join(_proc(fd), name)  # the folder held by fd, whatever its path now
    if stat.S_ISDIR(info.st_mode):
        copy_tree(source, target)  # without recursion: a command may have made it deep
    else:
        shutil.copy2(source, target, follow_symlinks=False)


def _remove(fd: int, name: str) -> None:
    """Remove ``name`` inside ``fd`` (a folder by :func:`~stockade.trees.remove_at`'s
    descriptor walk, without recursion)."""
    if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
        remove_at(fd, name)
    else:
        os.unlink(name, dir_fd=fd)
