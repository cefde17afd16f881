"""Which files a command created, modified and deleted in a workspace folder: exact, cheap.

:class:`Watch` takes the *before* state of the tree, the command runs, and
:meth:`Watch.finish` returns a :class:`~stockade.request.result.Changes`.

Why inotify plus a getdents-only listing: an ``lstat`` walk of a 10,000-file tree costs about
19 ms in Python, so walking and stat-ing it before and after every command is too slow (the
target is 20 ms per command on 10,000 files). Instead the before state is one walk with
:func:`os.scandir` that stats nothing (the inode and the entry type come with the directory
entries), and every directory gets an inotify watch. While the command runs, a daemon
thread drains the inotify queue (so a busy command does not overflow it), noting the
directories and the names that saw events. At the end only those directories are listed
again and compared with their before listings; only names that saw an ambiguous event are
stat-ed.

Exactness rules, per path (directories end in ``/``):

- a name gone from its directory is deleted; a directory deleted counts with everything it
  held, from the before listing. A new name is created; a new directory is walked, and all
  in it is created. A directory turned into a file or a symlink (or back) is one path
  deleted and another created.
- a name kept with another inode was replaced (by a rename): modified. A name kept with
  its inode is modified when it saw a write, an attribute change or an entry event
  (deleted and created again, moved away and back); when it only saw a writable file being
  closed (perhaps written through ``mmap``), when its mtime falls in the run.
- a directory is not modified by entries coming and going (they are listed themselves),
  only by its own attributes or by being replaced. One whose watch died, or which is another
  directory than before, is compared by path: all at the same path in it was put there
  during the run, so is modified.
- symlinks are entries, never followed: directories are opened one level at a time relative
  to their parent with ``O_NOFOLLOW``, so no path outside the root is ever listed. The root
  deleted or replaced reports everything it held deleted (and what is there now created).

Fallback: when inotify cannot be used (no instance, out of watches, the queue overflowed)
the method is ``scan``: the tree is listed again and compared, and a kept entry is modified
when its ctime falls in the run (a directory: when its ctime did but its mtime did not, so
that entries coming and going do not count; a chmod and an entry change in the same run are
then missed). This stats every entry, which only the fallback accepts.

Bound: the before listing costs about 0.5 ms per 1,000 entries; a tree of more than
``max_entries`` entries raises :class:`TooLarge` once that many are listed.

Known limits: changes by other processes during the run count too; a file opened for
writing and closed untouched counts as modified if its mtime is in the run (or up to one
clock tick before it); the insides of unreadable directories, and of directories nested
deeper than the open-file limit, are not listed.
"""

from __future__ import annotations

import os
import time
from itertools import islice
from typing import Any

from .. import resolved
from ..request.literals import ChangeMethod
from ..request.result import Changes

Listing = dict[str, tuple[int, bool]]  # name -> (inode, is a directory)

# inotify.h event bits (the watch mask itself is built from inotify_simple.flags)
_MODIFY, _ATTRIB, _CLOSE_WRITE = 0x2, 0x4, 0x8
_ENTRY = 0x40 | 0x80 | 0x100 | 0x200  # MOVED_FROM, MOVED_TO, CREATE, DELETE
_DEAD = 0x400 | 0x8000  # DELETE_SELF, IGNORED
_OVERFLOW = 0x4000
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CLOCK_REALTIME_COARSE = 5  # the clock file times come from (Linux; unnamed in `time`)
_NORMAL, _MOVED, _SCAN, _NEW = range(4)  # how a directory is compared with its before state


class TooLarge(Exception):
    """The tree holds more entries than ``max_entries``: no changes list is kept."""


class Watch:
    """The before state of ``root`` and an inotify watch on it; :meth:`finish` says what changed."""

    def __init__(self, root: str, *, limit: int = 1000, max_entries: int = 100_000) -> None:
        self._root = resolved.realpath(root)  # a symlink naming the root is the caller's own
        self._limit = limit
        self._max = max_entries
        self._stamp = time.time_ns() - int(time.clock_getres(_CLOCK_REALTIME_COARSE) * 1e9)
        # directory ("" or "a/b/") -> its entries: inode and type came with them, unstat-ed
        self._before: dict[str, list[os.DirEntry[str]]] = {}
        self._wds: dict[int, str] = {}
        self._names: dict[str, int] = {}  # "a/b/name" -> OR of the masks it saw
        self._dirty: set[str] = set()
        self._dead: set[str] = set()
        self._overflow = False
        self._inotify: Any = None
        self._wake = -1
        self._thread: Any = None
        self._state = "watching"
        st = os.stat(self._root)
        self._root_id = (st.st_dev, st.st_ino)
        try:
            self._arm()
            self._list_before()
            self._spawn_drain()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _arm(self) -> None:
        import inotify_simple  # type: ignore[import-untyped]

        f = inotify_simple.flags
        mask = f.CREATE | f.DELETE | f.MOVED_FROM | f.MOVED_TO | f.MODIFY | f.ATTRIB
        mask |= f.CLOSE_WRITE | f.DELETE_SELF | f.MOVE_SELF
        self._mask = int(mask | f.ONLYDIR | f.DONT_FOLLOW | f.EXCL_UNLINK)
        self._parse = inotify_simple.parse_events
        if getattr(inotify_simple, "_libc", False) is None:  # it would find_library("c"): 3 ms
            import ctypes

            inotify_simple._libc = ctypes.CDLL(None, use_errno=True)
        try:
            self._inotify = inotify_simple.INotify(nonblocking=True)
        except OSError:  # out of instances (EMFILE): scan
            self._overflow = True

    def _list_before(self) -> None:
        """List the tree once, each folder through a descriptor checked to be the one its
        parent's listing named (inode and device): a folder on the way swapped for a link
        since would otherwise list what lies beyond it."""
        count, stack = 0, [("", self._root_id)]
        while stack:
            rel, expected = stack.pop()
            path = self._root + "/" + rel[:-1] if rel else self._root
            watched = self._watch(path, rel)  # before listing it: nothing slips in between
            try:
                entries, dev = self._entries(path, expected, self._max - count + 1)
            except OSError:  # vanished (its parent saw that) or unreadable: not tracked
                entries, dev = [], 0
            else:
                if not watched:  # a directory no watch covers: only a scan can tell
                    self._fall_back()
            self._before[rel] = entries
            count += len(entries)
            if count > self._max:
                raise TooLarge(f"{self._root} holds more than {self._max} entries")
            stack.extend(
                (rel + e.name + "/", (dev, e.inode()))
                for e in entries
                if e.is_dir(follow_symlinks=False)
            )

    def _entries(
        self, path: str, expected: tuple[int, int], most: int
    ) -> tuple[list[os.DirEntry[str]], int]:
        """The entries of folder ``path`` (at most ``most``) and its device, when it is the
        folder ``expected`` names; none (and a scan) when it is another: swapped, or a mount."""
        fd = os.open(path, _OPEN_DIR)
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != expected:
                self._fall_back()  # the scan walks by descriptor from the root
                return [], st.st_dev
            with os.scandir(fd) as it:  # kept as they come: a dict costs half as much again
                return list(islice(it, most)), st.st_dev
        finally:
            os.close(fd)

    def _watch(self, path: str, rel: str) -> bool:
        if self._inotify is None:
            return True
        try:
            self._wds[self._inotify.add_watch(path, self._mask)] = rel
        except OSError:  # out of watches (ENOSPC), or the directory is gone or swapped
            return False
        return True

    def _fall_back(self) -> None:
        self._overflow = True
        self._release()

    def _spawn_drain(self) -> None:
        if self._inotify is None:
            return
        import threading

        self._wake = os.eventfd(0, os.EFD_CLOEXEC)
        self._drained = threading.Event()
        self._thread = threading.Thread(
            target=self._drain, args=(self._inotify,), name="stockade-changes", daemon=True
        )
        self._thread.start()

    def _drain(self, inotify: Any) -> None:  # noqa: ANN401 - inotify_simple is untyped
        """The thread: read events as they come, until woken; then close the instance."""
        import select

        try:
            poller = select.poll()
            poller.register(inotify.fileno(), select.POLLIN)
            poller.register(self._wake, select.POLLIN)
            while not self._overflow:  # overflowed: the scan will tell, stop reading
                ready = poller.poll()
                self._read(inotify.fileno())
                if any(fd == self._wake for fd, _ in ready):
                    break
        except Exception:  # noqa: BLE001 - whatever broke the reader, the scan still answers
            self._overflow = True
        finally:
            self._drained.set()
            inotify.close()  # waits for an RCU grace period (10-20 ms): not on the caller's time

    def _read(self, fd: int) -> None:
        while not self._overflow:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                return
            for wd, mask, _cookie, name in self._parse(data):
                rel = self._wds.get(wd)
                if mask & _OVERFLOW:
                    self._overflow = True
                elif rel is not None:
                    if mask & _DEAD:
                        self._dead.add(rel)
                    if name:
                        self._dirty.add(rel)
                        key = rel + name
                        self._names[key] = self._names.get(key, 0) | mask
            if len(self._names) > self._max:
                self._overflow = True

    def _stop(self) -> None:
        """Collect every event left (the kernel queued them all before the command exited)."""
        if self._thread is not None:
            os.eventfd_write(self._wake, 1)
            self._drained.wait()
            self._thread = self._inotify = None  # the thread closes it
        elif self._inotify is not None:
            if not self._overflow:
                self._read(self._inotify.fileno())
            self._release()
        if self._wake >= 0:
            os.close(self._wake)
            self._wake = -1

    def _release(self) -> None:
        """Close the instance from a thread of its own: that waits for an RCU grace period."""
        if self._inotify is not None:
            import threading

            threading.Thread(target=self._inotify.close, daemon=True).start()
            self._inotify = None

    def close(self) -> None:
        """Release the watch without a result (idempotent)."""
        self._stop()
        if self._state == "watching":
            self._state = "closed"

    def finish(self) -> Changes:
        """Call after the command exited: drain the events, reconcile, return the changes."""
        if self._state != "watching":
            raise RuntimeError(f"this watch is {self._state}: finish() gives one result")
        self._state = "finished"
        self._stop()
        out: tuple[list[str], list[str], list[str]] = ([], [], [])
        self._reconcile(out)
        return self._result(out, "scan" if self._overflow else "inotify")

    def _reconcile(self, out: tuple[list[str], list[str], list[str]]) -> None:
        try:
            fd = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            fd = -1
        try:
            st = os.fstat(fd) if fd >= 0 else None
            if st is None or (st.st_dev, st.st_ino) != self._root_id or "" in self._dead:
                for entry in self._before[""]:
                    self._gone(entry.name, entry.is_dir(follow_symlinks=False), out[2])
                if fd >= 0:
                    self._walk(fd, _NEW, out)
                return
            self._walk(fd, _SCAN if self._overflow else _NORMAL, out)
        finally:
            if fd >= 0:
                os.close(fd)

    def _walk(self, root_fd: int, mode: int, out: tuple[list[str], list[str], list[str]]) -> None:
        """Compare directories from the root down, holding one fd per level being walked."""
        visit = {""}
        for dirty in self._dirty:
            rel = dirty
            while rel not in visit:  # the dirty directories and their ancestors
                visit.add(rel)
                rel = rel[: rel.rstrip("/").rfind("/") + 1]
        left: dict[int, int] = {}  # fd -> children not yet opened from it
        stack: list[tuple[int, str, str, int]] = [(-1, "", "", mode)]
        try:
            while stack:
                parent, name, rel, how = stack.pop()
                try:
                    fd = os.dup(root_fd) if parent < 0 else os.open(name, _OPEN_DIR, dir_fd=parent)
                except OSError:  # swapped or too deep: not listed
                    fd = -1
                if parent >= 0:
                    left[parent] -= 1
                    if not left[parent]:
                        os.close(parent)
                        del left[parent]
                if fd < 0:
                    continue
                children = self._compare(fd, rel, how, visit, out)
                if children:
                    left[fd] = len(children)
                    stack.extend((fd, n, rel + n + "/", h) for n, h in reversed(children))
                else:
                    os.close(fd)
        finally:
            for fd in left:
                os.close(fd)

    def _compare(
        self,
        fd: int,
        rel: str,
        how: int,
        visit: set[str],
        out: tuple[list[str], list[str], list[str]],
    ) -> list[tuple[str, int]]:
        """Sort one directory's entries into ``out``; return the subdirectories to descend."""
        created, modified, deleted = out
        now = self._listed(fd, rel, how)
        before = {} if how == _NEW else _listing(self._before.get(rel, []))
        descend: list[tuple[str, int]] = []
        for name in before.keys() | now.keys():
            old, new, path = before.get(name), now.get(name), rel + name
            if old is not None and (new is None or new[1] != old[1]):
                self._gone(path, old[1], deleted)
            if new is not None and (old is None or new[1] != old[1]):
                created.append(path + "/" if new[1] else path)
                if new[1]:
                    descend.append((name, _NEW))
            elif old is None or new is None:
                continue
            elif not new[1]:
                if old[0] != new[0] or how == _MOVED or self._touched(fd, name, path, how):
                    modified.append(path)
            else:
                kept = old[0] == new[0]
                descent = self._compare_dir(fd, name, path, how, kept=kept, modified=modified)
                if descent != _NORMAL or path + "/" in visit:
                    descend.append((name, descent))
        return descend

    def _listed(self, fd: int, rel: str, how: int) -> Listing:
        """The entries of directory ``rel``, open at ``fd``, now ({} if it cannot be listed)."""
        try:
            return _list(fd)
        except OSError:
            return {}

    def _compare_dir(
        self, fd: int, name: str, path: str, how: int, *, kept: bool, modified: list[str]
    ) -> int:
        """A directory there before and after: note it if modified; how to compare its insides."""
        same = kept and path + "/" not in self._dead  # the very directory that was watched
        if how == _SCAN:
            st = _stat(fd, name)
            # ctime moved but mtime did not: its metadata changed, not just its entries
            if not same or (st is not None and st.st_mtime_ns < self._stamp <= st.st_ctime_ns):
                modified.append(path + "/")
            return _SCAN
        if not same or how == _MOVED or self._names.get(path, 0) & (_ATTRIB | _ENTRY):
            modified.append(path + "/")
        return _NORMAL if same else _MOVED

    def _touched(self, fd: int, name: str, path: str, how: int) -> bool:
        """Whether a file kept with its inode was written during the run."""
        if how == _SCAN:
            st = _stat(fd, name)
            return st is None or st.st_ctime_ns >= self._stamp
        mask = self._names.get(path, 0)
        if mask & (_MODIFY | _ATTRIB | _ENTRY):
            return True
        if mask & _CLOSE_WRITE:  # opened for writing, perhaps written through mmap
            st = _stat(fd, name)
            return st is None or st.st_mtime_ns >= self._stamp
        return False

    def _gone(self, path: str, is_dir: bool, deleted: list[str]) -> None:  # noqa: FBT001
        """``path`` and, for a directory, everything it held before."""
        stack = [(path, is_dir)]
        while stack:
            path, is_dir = stack.pop()
            if not is_dir:
                deleted.append(path)
                continue
            deleted.append(path + "/")
            for e in self._before.get(path + "/", []):
                stack.append((path + "/" + e.name, e.is_dir(follow_symlinks=False)))

    def _result(self, out: tuple[list[str], list[str], list[str]], method: ChangeMethod) -> Changes:
        total, room, lists = 0, self._limit, []
        for paths in out:
            total += len(paths)
            kept = sorted(paths)[: max(room, 0)]
            room -= len(kept)
            lists.append(tuple(kept))
        return Changes(*lists, total=total, truncated=total > self._limit, method=method)


def _listing(entries: list[os.DirEntry[str]]) -> Listing:
    return {e.name: (e.inode(), e.is_dir(follow_symlinks=False)) for e in entries}


def _list(fd: int) -> Listing:
    with os.scandir(fd) as entries:
        return _listing(list(entries))


def _stat(fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None


def watch(root: str, *, limit: int = 1000, max_entries: int = 100_000) -> Watch:
    """Take the before state of ``root`` and start watching it (see :class:`Watch`)."""
    return Watch(root, limit=limit, max_entries=max_entries)
