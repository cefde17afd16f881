"""Watches kept on a folder between commands: what a command changed, at the cost of what
changed since the last one.

A per-call :class:`~stockade.run.changes.Watch` lists the whole tree before each command
(about 0.5 ms per 1,000 entries) and arms an inotify watch on every directory. A process
that lives between commands (the warm server, :mod:`stockade.server`) can keep that work:
a :class:`Kept` watch lists the tree once, keeps its inotify instance and its drain thread,
and keeps its listing current from the event stream. Each :meth:`Kept.settle` drains the
events queued so far, lists again only the directories that saw events (with the rules of
:class:`~stockade.run.changes.Watch`, which does the comparing), and makes those listings
the new "before". A command's changes are then one settle just before it starts (what
others changed since the last command, discarded) and one just after it exited.

:class:`Watches` keeps one :class:`Kept` per folder and lends it to one command at a time:

- **Two commands at once in one folder.** The second gets a per-call ``Watch`` of its own
  (a full listing), as an agent's workspace gets today. Either list may include what the
  other wrote: a watch sees every process's changes to the folder, never who made them.
- **Too large.** A folder of more than ``max_entries`` entries is not watched: its result
  has no changes list, and the folder is not tried again for ``idle`` seconds.
- **Out of inotify watches or instances, or a queue overflow.** The answer for that command
  is a scan (``method = "scan"``), as a per-call watch would give; the kept watch is then
  dropped and the next command in the folder makes a new one.
- **Released.** A kept watch unused for ``idle`` seconds is closed (:meth:`Watches.sweep`,
  which its owner calls), and past ``keep`` folders the least recently used one is closed;
  one lent to a command never is. Closing releases its inotify instance and its thread.

Why hand-written: :class:`~stockade.run.changes.Watch` is (see its docstring); this keeps
its state between commands and adds only the bookkeeping of which watch names which
directory as directories come, go and move.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import TYPE_CHECKING, Protocol

from .. import resolved
from .changes import _CLOCK_REALTIME_COARSE, _MOVED, _NEW, TooLarge, Watch, _listing

if TYPE_CHECKING:
    from ..request.result import Changes
    from .changes import Listing


_clock = time.monotonic  # what "unused for idle seconds" is measured with


class Tracker(Protocol):
    """What watches one command's folder: its changes once it exited, or nothing."""

    def finish(self) -> Changes | None: ...

    def close(self) -> None: ...


class Unwatchable(Exception):
    """The tree cannot be watched with inotify (no instance, out of watches)."""


class Kept(Watch):
    """A :class:`~stockade.run.changes.Watch` that answers again and again.

    Attributes:
        broken: why it can no longer keep its listing current ("" while it can); the owner
            drops a broken watch and makes a new one.
    """

    def __init__(self, root: str, *, limit: int = 1000, max_entries: int = 100_000) -> None:
        self._lock = threading.RLock()  # the drain thread's reads against a settle
        self._wd_of: dict[str, int] = {}  # directory -> its watch descriptor
        self._after: dict[str, list[os.DirEntry[str]]] = {}
        self.broken = ""
        super().__init__(root, limit=limit, max_entries=max_entries)
        if self._overflow:  # no instance, or a directory no watch covers
            self.close()
            raise Unwatchable(f"{self._root}: no inotify instance or watch to spare")

    def settle(self) -> Changes:
        """What changed since the last settle (or since it was made); the listing is then
        current again. Call :meth:`settle` just before a command starts and just after it
        exits: the second answer is the command's.

        Raises:
            RuntimeError: it was closed.
        """
        with self._lock:
            if self._state != "watching":
                raise RuntimeError(f"this kept watch is {self._state}")
            if not self._overflow and self._inotify is not None:
                self._read(self._inotify.fileno())  # every event queued so far
            stamp = time.time_ns() - int(time.clock_getres(_CLOCK_REALTIME_COARSE) * 1e9)
            out: tuple[list[str], list[str], list[str]] = ([], [], [])
            self._after = {}
            overflowed = self._overflow
            if not (overflowed or self._dirty or self._dead or self._root_replaced()):
                self._stamp = stamp  # no event anywhere: nothing to list
                return self._result(out, "inotify")
            self._reconcile(out)
            changes = self._result(out, "scan" if overflowed else "inotify")
            self._update(out[2])
            self._names, self._dirty, self._dead = {}, set(), set()
            self._stamp = stamp
        return changes

    def _update(self, deleted: list[str]) -> None:
        """Make what the last reconcile listed the new before-state; drop what went."""
        if self._overflow:
            self.broken = "the inotify queue overflowed, or a directory could not be watched"
        elif self._root_replaced():
            self.broken = "the folder itself was deleted or replaced"
        for path in deleted:
            if path.endswith("/") and path not in self._after:
                self._before.pop(path, None)
                self._unwatch(path)
        if not self._after:
            return
        self._before.update(self._after)
        self._after = {}
        if sum(map(len, self._before.values())) > self._max:
            self.broken = f"it now holds more than {self._max} entries"

    def _root_replaced(self) -> bool:
        try:
            st = os.stat(self._root)
        except OSError:
            return True
        return (st.st_dev, st.st_ino) != self._root_id or "" in self._dead

    def _listed(self, fd: int, rel: str, how: int) -> Listing:
        """The directory's entries now, kept as its next before-state; a directory new at
        its path (created, moved in, replaced) is watched first."""
        if how in (_NEW, _MOVED) and not self._overflow:
            path = self._root + "/" + rel[:-1] if rel else self._root
            if not self._watch(path, rel):
                self._overflow = True  # this command's answer stands; the next needs a scan
        try:
            with os.scandir(fd) as it:
                entries = list(it)
        except OSError:
            entries = []
        self._after[rel] = entries
        return _listing(entries)

    def _watch(self, path: str, rel: str) -> bool:
        if self._inotify is None or self._overflow:
            return True
        try:
            wd = self._inotify.add_watch(path, self._mask)
        except OSError:
            return False
        with self._lock:
            old = self._wd_of.get(rel)
            if old is not None and old != wd:
                self._unwatch(rel)  # that directory was replaced at this path
            moved = self._wds.get(wd)  # one inode has one descriptor: it moved here
            if moved is not None and moved != rel and self._wd_of.get(moved) == wd:
                del self._wd_of[moved]
            self._wds[wd], self._wd_of[rel] = rel, wd
        return True

    def _unwatch(self, rel: str) -> None:
        wd = self._wd_of.pop(rel, None)
        if wd is None or self._wds.get(wd) != rel:
            return
        del self._wds[wd]
        if self._inotify is not None and not self._overflow:
            with contextlib.suppress(OSError):
                self._inotify.rm_watch(wd)

    def _read(self, fd: int) -> None:
        with self._lock:
            super()._read(fd)

    @property
    def entries(self) -> int:
        """How many entries its listing holds."""
        with self._lock:
            return sum(map(len, self._before.values()))


class _Lent:
    """A kept watch lent to one command: its changes once the command exited."""

    def __init__(self, owner: Watches, root: str, kept: Kept) -> None:
        self._owner, self._root, self._kept = owner, root, kept

    def finish(self) -> Changes | None:
        try:
            return self._kept.settle()
        except (OSError, RuntimeError):
            self._kept.broken = "it failed to settle"
            return None
        finally:
            self._owner.give_back(self._root, self._kept)

    def close(self) -> None:
        """The command did not finish: keep the listing current, give it back."""
        with contextlib.suppress(OSError, RuntimeError):
            self._kept.settle()
        self._owner.give_back(self._root, self._kept)


class _Slot:
    def __init__(self) -> None:
        self.kept: Kept | None = None
        self.lent = True  # made for a command that is about to use it
        self.used = _clock()


class Watches:
    """Kept watches by folder, lent to one command at a time (see the module's docstring).

    Args:
        keep: how many folders are watched at most while no command uses them.
        idle: seconds after which an unused watch is closed (and a folder found too large
            is tried again).
        limit: ``Watch``'s ``limit`` (the lists hold at most that many paths).
        max_entries: ``Watch``'s ``max_entries`` (a larger tree gets no list).
    """

    def __init__(
        self,
        *,
        keep: int = 8,
        idle: float = 600.0,
        limit: int = 1000,
        max_entries: int = 100_000,
    ) -> None:
        self.keep, self.idle, self.limit, self.max_entries = keep, idle, limit, max_entries
        self._slots: dict[str, _Slot] = {}
        self._too_large: dict[str, float] = {}  # folder -> when it may be tried again
        self._lock = threading.Lock()
        self._closed = False

    def track(self, folder: str) -> Tracker | None:
        """Start watching ``folder`` for one command (``None``: it is too large to)."""
        root = resolved.realpath(folder)
        now = _clock()
        with self._lock:
            if self._too_large.get(root, 0.0) > now:
                return None
            slot = self._slots.get(root)
            lend = not self._closed and (slot is None or not slot.lent)
            if lend:
                if slot is None:
                    slot = self._slots[root] = _Slot()
                slot.lent, slot.used = True, now
        if not lend:  # another command is using it (or closing): a watch of its own
            return self._per_call(root)
        assert slot is not None  # noqa: S101 - set above
        kept = slot.kept
        if kept is not None:
            with contextlib.suppress(OSError, RuntimeError):
                kept.settle()  # what others changed since the last command: not this one's
            if kept.broken:
                kept.close()
                kept = slot.kept = None
        if kept is None:
            try:
                kept = slot.kept = Kept(root, limit=self.limit, max_entries=self.max_entries)
            except TooLarge:
                self._drop(root, too_large=True)
                return None
            except (OSError, Unwatchable):
                self._drop(root)
                return self._per_call(root)
        self._evict()
        return _Lent(self, root, kept)

    def _per_call(self, root: str) -> Tracker | None:
        try:
            return Watch(root, limit=self.limit, max_entries=self.max_entries)
        except TooLarge:
            return None
        except OSError:  # the folder is gone: nothing to list
            return None

    def _drop(self, root: str, *, too_large: bool = False) -> None:
        with self._lock:
            slot = self._slots.pop(root, None)
            if too_large:
                self._too_large[root] = _clock() + self.idle
        if slot is not None and slot.kept is not None:
            slot.kept.close()

    def give_back(self, root: str, kept: Kept) -> None:
        """A command is done with ``root``'s kept watch."""
        with self._lock:
            slot = self._slots.get(root)
            mine = slot is not None and slot.kept is kept and not self._closed
            if mine:
                assert slot is not None  # noqa: S101 - checked
                slot.lent, slot.used = False, _clock()
        if not mine or kept.broken:
            if mine:
                self._drop(root)
            else:
                kept.close()

    def _evict(self) -> None:
        """Close the least recently used watches past ``keep`` (never one that is lent)."""
        with self._lock:
            idle = sorted((s.used, r) for r, s in self._slots.items() if not s.lent)
            excess = len(self._slots) - self.keep
            gone = [self._slots.pop(r) for _, r in idle[: max(excess, 0)]]
        for slot in gone:
            if slot.kept is not None:
                slot.kept.close()

    def sweep(self) -> int:
        """Close the watches unused for ``idle`` seconds; how many are left."""
        now = _clock()
        with self._lock:
            old = [r for r, s in self._slots.items() if not s.lent and now - s.used > self.idle]
            gone = [self._slots.pop(r) for r in old]
            self._too_large = {r: t for r, t in self._too_large.items() if t > now}
            left = len(self._slots)
        for slot in gone:
            if slot.kept is not None:
                slot.kept.close()
        return left

    def watched(self) -> dict[str, bool]:
        """The folders watched now, each with whether a command is using it."""
        with self._lock:
            return {root: slot.lent for root, slot in self._slots.items()}

    def close(self) -> None:
        """Close every watch; one lent now is closed when its command gives it back."""
        with self._lock:
            self._closed = True
            slots, self._slots = list(self._slots.values()), {}
        for slot in slots:
            if slot.kept is not None and not slot.lent:
                slot.kept.close()
