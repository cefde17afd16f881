"""Trees of any depth, walked and removed without recursion.

A command makes trees of any depth (``mkdirat`` relative to a folder's descriptor, which
``PATH_MAX`` does not limit): in its workspace, its layer, its scratch home. The standard
library's walks are recursive in Python 3.11 (:func:`os.walk`, :func:`os.fwalk`,
:meth:`pathlib.Path.rglob`, :func:`shutil.rmtree`, :func:`shutil.copytree`) and raise
``RecursionError`` on such a tree, which no ``ignore_errors`` or ``onerror`` catches. So
every walk, removal and copy (:mod:`stockade.tree_copy`) of a tree a command could have
written is written here by hand: a tree is walked (:func:`walk`) and removed
(:func:`remove_tree`, :func:`remove_at`) by folder descriptors, one level at a time,
holding at most :data:`WINDOW` of them open: a folder left is found again from its child by
``..``, and the walk stops if that is no longer the folder it came from (a swap meanwhile),
so it never leaves the tree. Nothing is followed through a link.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from typing import TypeVar

import attrs

T = TypeVar("T")


def remove_tree(folder: str) -> None:
    """Remove ``folder`` whatever it holds (a command may have left folders it took its own
    rights away from); a folder that was never made is fine, and a link there is removed,
    never followed.

    By descriptors only, without recursion, however deep the tree (:func:`_clear`): each
    folder is given back its rights through a descriptor opened without following a link,
    entered by ``O_NOFOLLOW`` from its parent's descriptor and emptied by names relative to
    it. A command still writing in the tree (a fork's upper whose mount was detached while
    busy) that swaps a folder for a link mid-walk makes this remove the link, never change
    or remove what the link names.
    """
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder)
        return
    with contextlib.suppress(OSError):
        _own(os.path.dirname(os.path.abspath(folder)), os.path.basename(folder))
    try:
        top = os.open(folder, READ_FOLDER)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):  # a link or a file put there since
            with contextlib.suppress(OSError):
                os.unlink(folder)
        return
    _clear(top)
    with contextlib.suppress(OSError):
        os.rmdir(folder)


def remove_at(parent: int, name: str, *, own: bool = False) -> None:
    """Remove ``name`` of folder ``parent`` (a descriptor) and everything in it, as
    ``shutil.rmtree(name, dir_fd=parent)`` does, but without recursion however deep the
    tree (:func:`_clear`); a file or a link there is unlinked, never followed. ``own``:
    folders a command took its own rights away from get them back first (else they stay).

    Raises:
        OSError: ``name`` is not there, or is there still (something in it could not be
            removed), as :func:`shutil.rmtree` raises without ``ignore_errors``.
    """
    try:
        fd = os.open(name, READ_FOLDER, dir_fd=parent)
    except OSError as error:
        if error.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        os.unlink(name, dir_fd=parent)  # a file or a link: the name only
        return
    _clear(fd, own=own)
    os.rmdir(name, dir_fd=parent)  # ENOTEMPTY: what could not be removed stays, and is said


def empty(folder: str) -> int:
    """Remove everything in ``folder`` (the folder itself stays), without recursion however
    deep a command made it and never following a link (:func:`remove_at`); how many entries
    were removed.

    Raises:
        OSError: ``folder`` cannot be opened, or an entry could not be removed.
    """
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        names = os.listdir(fd)
        for name in names:
            remove_at(fd, name)
    finally:
        os.close(fd)
    return len(names)


ROUNDS = 3
"""How many times an emptied folder is listed again before it is removed: a process still
writing in it (a detached fork's upper) may have put something there meanwhile."""


def _clear(top: int, *, own: bool = True) -> None:
    """Remove everything in folder ``top`` (a descriptor, closed after), bottom up, by names
    relative to folder descriptors (:class:`FolderChain`: at most :data:`WINDOW` of them open).
    Best effort, as :func:`shutil.rmtree` with ``ignore_errors``: what cannot be removed
    stays. ``own``: each folder gets its owner's rights back before it is entered."""
    chain = FolderChain(top)
    todo = [_listed(top)]  # the names left to remove in each folder of the chain
    rounds = [1]
    try:
        while True:
            if todo[-1]:
                name = todo[-1].pop()
                if _unlinked(chain.fd, name) or not _entered(chain, name, own=own):
                    continue
                todo.append(_listed(chain.fd))
                rounds.append(1)
            elif rounds[-1] < ROUNDS and (again := _listed(chain.fd)):
                todo[-1], rounds[-1] = again, rounds[-1] + 1
            elif chain.depth > 0:
                name = chain.name
                todo.pop()
                rounds.pop()
                chain.up()
                with contextlib.suppress(OSError):
                    os.rmdir(name, dir_fd=chain.fd)
            else:
                return
    except OSError:
        return  # a folder moved while it was emptied (:meth:`FolderChain.up`): the rest stays
    finally:
        chain.close()


def _unlinked(fd: int, name: str) -> bool:
    """Whether entry ``name`` of folder ``fd`` is gone (unlinked, or was not there, or cannot
    be removed); ``False``: it is a folder."""
    try:
        os.unlink(name, dir_fd=fd)
    except IsADirectoryError:
        return False
    except OSError:
        pass
    return True


def _entered(chain: FolderChain, name: str, *, own: bool) -> bool:
    """Whether the chain went down into folder ``name``, given back its owner's rights
    first (``own``); one swapped for a link or a file meanwhile is unlinked instead."""
    if own:
        with contextlib.suppress(OSError):
            _own(chain.fd, name)
    try:
        chain.down(name)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=chain.fd)
        return False
    return True


def _listed(fd: int) -> list[str]:
    try:
        return os.listdir(fd)
    except OSError:
        return []


def _own(parent: str | int, name: str) -> None:
    """Give folder ``name`` of ``parent`` (a path or a folder's descriptor) back its owner's
    rights (0700), through a descriptor of it opened without following a link.

    Raises:
        OSError: it is gone, or not a folder (a link put in its place).
    """
    if isinstance(parent, str):
        fd = os.open(os.path.join(parent, name), _FOLDER)
    else:
        fd = os.open(name, _FOLDER, dir_fd=parent)
    try:
        os.chmod(f"/proc/self/fd/{fd}", 0o700)  # an O_PATH descriptor: by its inode
    finally:
        os.close(fd)


_FOLDER = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""How a folder of a walk is opened: for listing, never through a link."""

PATH_MAX = 4096
"""The longest path the kernel takes, its ending NUL included: a longer one names nothing."""
WINDOW = 32
"""How many folder descriptors a walk holds open at most, however deep the tree."""


@attrs.define
class Visit:
    """One folder of a :func:`walk`.

    Attributes:
        fd: the folder, open until the walk moves on (the walk closes it).
        depth: how many folders below the top it is (``0``: the top).
        rel: its path relative to the top (``""``: the top itself); ``None`` once that is
            longer than :data:`PATH_MAX` (no path names it, and building ever longer ones
            would cost the square of the depth).
        folders: its folders' names, sorted; a name taken out is not walked into.
        others: the names of everything else in it (files, links, devices), sorted.
    """

    fd: int
    depth: int
    rel: str | None
    folders: list[str]
    others: list[str]


def walk(
    top: str, *, own: bool = False, refused: Callable[[int, str], None] | None = None
) -> Iterator[Visit]:
    """Every folder under ``top`` (``top`` first, then depth first, by name), as
    :func:`os.fwalk` gives them without following links, but with no recursion and at most
    :data:`WINDOW` descriptors open however deep the tree (:class:`FolderChain`). A folder that
    cannot be opened (gone, a link now) is skipped, as :func:`os.walk` skips it; ``own``:
    one of this user the command took its own rights from gets them back (``u+rwx``, as
    landing gives them) rather than being skipped. ``refused(depth, name)`` is told of each
    folder there that could not be opened for another reason (no right to it): ``name`` in
    the folder of depth ``depth`` last visited.

    Raises:
        OSError: a folder moved while it was walked (another process writes in the tree).
    """
    if own:
        own_folder(top)
    try:
        fd = os.open(top, READ_FOLDER)
    except OSError:
        return
    chain = FolderChain(fd)
    try:
        visit = _visit(chain, "")
        yield visit
        todo, rels = [visit.folders[::-1]], [visit.rel]
        while todo:
            if not todo[-1]:
                todo.pop()
                rels.pop()
                if todo:
                    chain.up()
                continue
            name = todo[-1].pop()
            try:
                chain.down(name, own=own)
            except OSError as error:
                if refused is not None and error.errno not in _GONE:
                    refused(chain.depth, name)
                continue
            visit = _visit(chain, child_rel(rels[-1], name))
            yield visit
            todo.append(visit.folders[::-1])
            rels.append(visit.rel)
    finally:
        chain.close()


def _visit(chain: FolderChain, rel: str | None) -> Visit:
    """The folder the chain is in, its entries sorted into folders (not followed) and the rest."""
    folders: list[str] = []
    others: list[str] = []
    with contextlib.suppress(OSError), os.scandir(chain.fd) as listing:
        for entry in listing:
            (folders if entry.is_dir(follow_symlinks=False) else others).append(entry.name)
    return Visit(chain.fd, chain.depth, rel, sorted(folders), sorted(others))


_GONE = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)  # no folder there (now): nothing to walk


TRIES = 3
"""How many times :func:`again` takes a walk a moved folder cut short."""


def again(take: Callable[[], T]) -> T:
    """``take()``, a walk of a tree another process writes in, taken again when a folder
    moved while it was walked (:func:`walk` raises ``OSError`` there, its count or search cut
    short, never to be taken as whole), :data:`TRIES` times in all.

    Raises:
        OSError: the last try's, when every one was cut short.
    """
    for _ in range(TRIES - 1):
        try:
            return take()
        except OSError:
            continue
    return take()


def nameable(path: str) -> str:
    """``path`` (absolute), or the deepest folder above it that a sandbox can still name
    (:data:`ROOM` short of :data:`PATH_MAX`): what lies deeper can only be hidden by hiding a
    folder above it (a mount or a Landlock rule needs a path), which then hides all it
    holds."""
    while len(os.fsencode(path)) >= PATH_MAX - ROOM:
        path = path[: path.rindex("/")] or "/"
    return path


ROOM = 256
"""What a sandbox may put before a path it hides (bubblewrap mounts it beneath its new root,
``/newroot``): a path this much short of ``PATH_MAX`` is one it can name."""


def child_rel(rel: str | None, name: str) -> str | None:
    """The relative path of folder ``name`` of folder ``rel``, while a path can name it."""
    if rel is None:
        return None
    path = f"{rel}/{name}" if rel else name
    return path if len(path) < PATH_MAX else None


class FolderChain:
    """The folders from a walk's top down to the one it is in, as descriptors, of which only
    the :data:`WINDOW` deepest stay open: going back up into a folder whose descriptor was
    closed opens ``..`` of its child again, and that must be the very folder (device and
    inode) it was, else the walk stops (``OSError``). So a walk neither leaves the tree
    nor runs out of descriptors, however deep it goes.

    Args:
        top: the top folder's descriptor (the chain closes it).
    """

    def __init__(self, top: int) -> None:
        self._fds = [top]  # -1: closed (every one above ``_first``)
        self._ids = [_identity(top)]
        self._names = [""]
        self._first = 0

    @property
    def fd(self) -> int:
        """The folder it is in."""
        return self._fds[-1]

    @property
    def name(self) -> str:
        """That folder's name in its parent (``""``: the top)."""
        return self._names[-1]

    @property
    def depth(self) -> int:
        """How many folders below the top it is."""
        return len(self._fds) - 1

    def down(self, name: str, *, own: bool = False) -> None:
        """Into folder ``name`` of the one it is in, not followed (:func:`_open_folder`).

        Raises:
            OSError: it is gone, not a folder (a link put there), or cannot be opened.
        """
        fd = open_folder(self.fd, name, own=own)
        self._fds.append(fd)
        self._ids.append(_identity(fd))
        self._names.append(name)
        if len(self._fds) - self._first > WINDOW:
            os.close(self._fds[self._first])
            self._fds[self._first] = -1
            self._first += 1

    def up(self) -> None:
        """Back into the folder above.

        Raises:
            OSError: the folder ``..`` leads to is not the one it came down from.
        """
        child = self._fds.pop()
        self._ids.pop()
        self._names.pop()
        try:
            if self._first == len(self._fds):  # the parent's descriptor was closed
                parent = os.open("..", READ_FOLDER, dir_fd=child)
                if _identity(parent) != self._ids[-1]:
                    os.close(parent)
                    raise OSError(errno.ESTALE, "a folder moved while it was walked")
                self._fds[-1] = parent
                self._first -= 1
        finally:
            os.close(child)

    def close(self) -> None:
        """Close every descriptor it holds."""
        for fd in self._fds[self._first :]:
            os.close(fd)
        self._fds, self._first = [-1], 1


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def open_folder(parent: int, name: str, *, own: bool) -> int:
    """Folder ``name`` of ``parent``, opened without following a link; ``own``: a folder of
    this user whose rights the command took away gets ``u+rwx`` back first (as landing
    gives it them).

    Raises:
        OSError: it is gone, not a folder, or cannot be opened.
    """
    if own:  # (one it can open but not search, r without x, lists names it cannot stat)
        _owned(os.open(name, _FOLDER, dir_fd=parent))
    return os.open(name, READ_FOLDER, dir_fd=parent)


def own_folder(path: str) -> None:
    """Give folder ``path`` (not followed) ``u+rwx`` back if it is this user's and lacks
    them: a command may have taken them from the folders it wrote (``chmod 300 .``), and
    the host must read what it made, as landing gives them back. What cannot be opened is
    left for the caller's own open to report."""
    with contextlib.suppress(OSError):
        _owned(os.open(path, _FOLDER))


def _owned(fd: int) -> None:
    """``u+rwx`` for the folder of ``fd`` (an ``O_PATH`` descriptor, closed here) when it
    is this user's and lacks them."""
    try:
        info = os.fstat(fd)
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and mode & 0o700 != 0o700:
            os.chmod(f"/proc/self/fd/{fd}", mode | 0o700)
    finally:
        os.close(fd)
