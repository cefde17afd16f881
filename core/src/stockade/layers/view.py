"""A running command's view of a root: its layer over the real folder, read from outside.

While a layered command runs (a background task, most of all), nothing it wrote is in the
real folder: a person, an editor and the plain file tools see the folder as it was. The file
tools can look at the command's own view instead, by its task id or action id: the upper
folder of its layer over the real root, merged the way the kernel's overlay merges them:

- a name in the upper folder hides the same name below; a whiteout (the overlay's mark of
  a deletion) hides it and shows nothing;
- a folder in both is the union of the two, unless the upper one is opaque (removed and
  made again): then only its own entries;
- every step is an ``openat`` from a folder descriptor already held, with ``O_NOFOLLOW``:
  the command writes into its upper folder while it is read, and a name it swaps for a
  symlink is refused, never followed (symlinks in a view are not followed at all; the
  workspace's file tools follow those that stay inside);
- reads go through :class:`~stockade.workspace.files.Workspace` on the folder that holds the
  file (its checks: one hard link, not masked, text or described binary).

The view is read-only: writing goes to the real folder through the workspace's tools.
A command that ended has no view any more (it landed, or waits: :mod:`stockade.layers.waiting`
lists what a waiting one would change).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import attrs

from .. import resolved
from ..errors import UsageError
from ..request import wire
from ..workspace.file_types import LIST_LIMIT, READ_LIMIT, Entry, Listing, ReadResult
from ..workspace.files import Workspace
from ..workspace.openat2 import _components, _display, _refusal
from . import journal
from .commit import marks, whiteout
from .place import Layer

if TYPE_CHECKING:
    from ..host import Host

_AT = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
STARTING = 2.0
"""Seconds a task just started is given to begin its command (and write its journal)."""


def of_command(store: str, action_id: str, root: str) -> View:
    """The view of command ``action_id``'s layer over ``root`` while it runs.

    Raises:
        UsageError: it has no layer over ``root`` now (it ended, writes directly, or covers
            other roots).
    """
    path = os.path.join(journal.folder(store), f"{os.path.basename(action_id)}.json")
    entry = None
    with contextlib.suppress(OSError, ValueError), open(path, "rb") as journal_file:
        entry = wire.from_json(journal_file.read(), journal.Entry)
    real = resolved.realpath(root)
    if entry is not None and entry.state == "running":
        for layer in entry.layers:
            if layer.root == real:
                return View(layer)
    raise UsageError(
        f"command {action_id} has no layer over {real} now: it ended (its writes landed, or "
        "wait for a person), it writes directly, or it does not write there",
        hint="read the folder itself; `stockade land` lists writes that wait",
    )


def of_task(host: Host, task_id: str, *, owner: str, root: str) -> View:
    """The view of ``owner``'s running task ``task_id`` over ``root`` (:func:`of_command`).

    Raises:
        UsageError: no such task of ``owner``'s, it ended, or it has no layer over ``root``.
    """
    from ..config.schema import store_folder

    store, deadline = store_folder(host.config), time.monotonic() + STARTING
    while True:
        found = [t for t in host.list_tasks(owner=owner) if t.task_id == task_id]
        if not found or found[0].status != "running":
            raise UsageError(
                f"no running task {task_id}",
                hint="list_commands / `stockade tasks` lists them; an ended task's writes landed",
            )
        try:
            return of_command(store, found[0].action_id, root)
        except UsageError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.01)  # its thread has not begun the command yet (the layers come then)


class View:
    """A layer's upper folder over its root, read as the overlay shows them.

    Args:
        layer: the command's layer.
    """

    def __init__(self, layer: Layer) -> None:
        self.layer = layer

    def file_list(self, path: str = ".", *, limit: int = LIST_LIMIT) -> Listing:
        """The entries of folder ``path`` in the view, sorted by name.

        Raises:
            UsageError: refused, missing, not a folder, or a symlink on the way.
        """
        if limit < 1:
            raise UsageError(f"limit must be at least 1, not {limit}")
        parts = _components(path)
        shown = _display(parts)
        try:
            with self._folders(parts) as (upper, lower):
                names: dict[str, Entry] = {}
                if lower is not None:
                    names.update((e.name, e) for e in _plain_entries(lower))
                if upper is not None:
                    for name, entry in _upper_entries(upper):
                        if entry is None:
                            names.pop(name, None)
                        else:
                            names[name] = entry
        except OSError as error:
            raise _refusal(shown, error) from None
        entries = sorted(names.values(), key=lambda e: e.name)
        return Listing(path=shown, entries=tuple(entries[:limit]), truncated=len(entries) > limit)

    def file_read(self, path: str, *, offset: int = 0, limit: int = READ_LIMIT) -> ReadResult:
        """Part of file ``path`` as the command sees it now
        (:meth:`~stockade.workspace.files.Workspace.file_read`'s result).

        Raises:
            UsageError: refused, missing, not a regular file, or a symlink on the way.
        """
        parts = _components(path)
        shown = _display(parts)
        if not parts:
            raise UsageError(f"path {shown!r} is a directory", hint="list it with file_list")
        try:
            with self._folders(parts[:-1]) as (upper, lower):
                holder = _holder(upper, lower, parts[-1])
                with Workspace(f"/proc/self/fd/{holder}", resolver="walk") as folder:
                    read = folder.file_read(parts[-1], offset=offset, limit=limit)
        except OSError as error:
            raise _refusal(shown, error) from None
        return attrs.evolve(read, path=shown)

    @contextlib.contextmanager
    def _folders(self, parts: list[str]) -> Iterator[tuple[int | None, int | None]]:
        """Descriptors of folder ``parts`` in the upper folder and in the root (``None``
        where the view takes nothing from that side), closed after."""
        first = os.open(self.layer.upper, _AT | os.O_DIRECTORY)
        try:
            lower: int | None = os.open(self.layer.root, _AT | os.O_DIRECTORY)
        except BaseException:
            os.close(first)
            raise
        upper: int | None = first
        try:
            for name in parts:
                given, upper, lower = (upper, lower), None, None  # _step closes them
                upper, lower = _step(*given, name)
            yield upper, lower
        finally:
            for fd in (upper, lower):
                if fd is not None:
                    os.close(fd)


def _step(upper: int | None, lower: int | None, name: str) -> tuple[int | None, int | None]:
    """One folder down in both sides (the descriptors given are closed)."""
    try:
        below_too = True
        found = None
        if upper is not None:
            info = _lstat(upper, name)
            if info is not None:
                if whiteout(info, marks(f"/proc/self/fd/{upper}/{name}")):
                    raise FileNotFoundError(errno.ENOENT, "deleted by the command", name)
                if not stat.S_ISDIR(info.st_mode):
                    raise _not_folder(info, name)
                below_too = marks(f"/proc/self/fd/{upper}/{name}").get("opaque") != b"y"
                found = os.open(name, _AT | os.O_DIRECTORY, dir_fd=upper)
        under = None
        if lower is not None and below_too:
            info = _lstat(lower, name)
            if info is not None and stat.S_ISDIR(info.st_mode):
                under = os.open(name, _AT | os.O_DIRECTORY, dir_fd=lower)
            elif info is not None and found is None:
                raise _not_folder(info, name)
        if found is None and under is None:
            raise FileNotFoundError(errno.ENOENT, "no such folder", name)
        return found, under
    finally:
        for fd in (upper, lower):
            if fd is not None:
                os.close(fd)


def _holder(upper: int | None, lower: int | None, name: str) -> int:
    """The folder descriptor (of ``upper`` or ``lower``) whose ``name`` the view shows."""
    if upper is not None:
        info = _lstat(upper, name)
        if info is not None:
            if whiteout(info, marks(f"/proc/self/fd/{upper}/{name}")):
                raise FileNotFoundError(errno.ENOENT, "deleted by the command", name)
            return _plain(upper, info, name)
    if lower is not None:
        info = _lstat(lower, name)
        if info is not None:
            return _plain(lower, info, name)
    raise FileNotFoundError(errno.ENOENT, "no such file", name)


def _plain(folder: int, info: os.stat_result, name: str) -> int:
    if stat.S_ISLNK(info.st_mode):
        raise OSError(errno.ELOOP, "a symlink (not followed in a command's view)", name)
    return folder


def _not_folder(info: os.stat_result, name: str) -> OSError:
    if stat.S_ISLNK(info.st_mode):
        return OSError(errno.ELOOP, "a symlink (not followed in a command's view)", name)
    return NotADirectoryError(errno.ENOTDIR, "not a folder", name)


def _lstat(folder: int, name: str) -> os.stat_result | None:
    try:
        return os.lstat(name, dir_fd=folder)
    except FileNotFoundError:
        return None


def _plain_entries(folder: int) -> Iterator[Entry]:
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=folder)
    try:
        yield from Workspace._entries(fd)  # the workspace's own kinds and sizes
    finally:
        os.close(fd)


def _upper_entries(folder: int) -> Iterator[tuple[str, Entry | None]]:
    """The upper folder's entries; a whiteout as ``(name, None)``."""
    for entry in list(_plain_entries(folder)):
        if entry.kind in ("other", "file") and entry.size == 0:
            info = _lstat(folder, entry.name)
            path = f"/proc/self/fd/{folder}/{entry.name}"
            if info is not None and whiteout(info, marks(path)):
                yield entry.name, None
                continue
        yield entry.name, entry
