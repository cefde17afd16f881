"""When a command's layers began, on the clock the kernel stamps file changes with.

A layer's landing keeps aside a path that changed in the real root after the command began
(a person's edit, another command's landing): the conflict check compares the path's change
time with the time the layers began. That time must be read from the clock file changes are
stamped with, not from the fine clock: the kernel stamps a change with its coarse clock (the
time at the last tick), raised to the finest stamp it has handed out so far on filesystems
with multigrain times (Linux 6.13), and the two clocks differ by a tick or more (5.3 ms
measured on the CI machines' kernel). Stamps never go backwards from one change to the next.

So :func:`begin` asks the filesystem: it stamps a file of the layer's own folder (the root's
filesystem, :mod:`~stockade.layers.place`) and reads the stamp back, which is at least that of
every change made before; then it stamps the file again until the stamp has moved on (at once
where multigrain times give a queried file a fine stamp, at the next tick where they do not),
so every change made after it returns is stamped later. There is no window of doubt either
way: a file a harness writes just before a run is not a conflict, and an edit made while the
command runs always is (on a filesystem that stores whole seconds, so is every change of the
second the layers began in: kept aside, never lost). A fixed margin of 10 ms under the fine
clock made a file written less than 10 ms before the run a conflict: its new version kept
aside instead of landing.

The stamps are the wall clock's, so a wall clock set back while a command runs (by hand,
by a time daemon's step, at a leap second) would stamp a person's edit before the layers
began, and the check would miss it: the command's version would land over the edit.
:func:`settled` therefore judges the clock itself before a landing. A live command's host
holds a :class:`Watch` (a ``timerfd`` the kernel cancels whenever the wall clock is set, in
either direction); a landing finished after a restart (:mod:`~stockade.layers.journal`) or
after a person's answer (:mod:`~stockade.layers.waiting`) compares the wall clock's offset
from the boot clock with the one the rules kept (it moves only when the wall clock is set:
a time daemon's slewing moves both clocks). A set seen by the watch, or another boot, makes
every path that both changed a conflict (kept aside, never lost); a net step back of ``D``
moves the time the layers began back by ``D``. ``timerfd`` is called through ``ctypes``:
Python has it only from 3.13.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import time
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING

import attrs

from ..record.live import boot_id

if TYPE_CHECKING:
    from .commit import Rules

STAMP = "began"
"""The file :func:`begin` stamps, in each layer's folder."""
MARGIN_NS = 20_000_000
"""Where no layer's folder can be stamped, how far under the fine clock the layers begin
(more than the ticks the coarse clock lags by): a change that soon before is a conflict,
kept aside, never lost."""
_LONGEST_NS = 20_000_000
"""How long a stamp is waited on to move (the coarse clock moves every tick, at most
10 ms at ``HZ=100``: two ticks). A filesystem that stores coarser times (whole seconds: ext4 with
128-byte inodes) is not waited out: the layers then begin just before the stamp, so every
change stamped in the same second, before or after, is a conflict. A wall clock set while
the command runs is :func:`settled`'s to judge."""
TOLERANCE_NS = 1_000_000
"""How far the wall clock's offset from the boot clock may seem to move without being set
(the two are read one after the other)."""
EVERY = 1
"""A time before every stamp: every path changed by both sides is a conflict."""


def begin(folders: Iterable[str]) -> int:
    """The time a command's layers begin: no earlier than the stamp of any change made before
    the call, earlier than the stamp of every change made after it returns.

    Args:
        folders: the layers' own folders (each on its root's filesystem).
    """
    try:
        stamps = [_stamped(os.path.join(folder, STAMP)) for folder in folders]
    except OSError:
        stamps = []
    return max(stamps) if stamps else time.time_ns() - MARGIN_NS


def _stamped(path: str) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    try:
        os.utime(fd)
        began = os.fstat(fd).st_ctime_ns
        deadline = time.monotonic_ns() + _LONGEST_NS
        while True:
            os.utime(fd)
            if os.fstat(fd).st_ctime_ns > began:
                return began
            if time.monotonic_ns() > deadline:  # coarse stamps (whole seconds): a change in
                return began - 1  # the same step is a conflict, kept aside, never lost
            time.sleep(0.0002)
    finally:
        os.close(fd)


def offset() -> int:
    """The wall clock less the boot clock, in nanoseconds: constant until the wall clock is
    set (a time daemon's slewing speeds or slows both)."""
    return time.clock_gettime_ns(time.CLOCK_REALTIME) - time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def kept(rules: Rules, folders: Iterable[str]) -> Rules:
    """``rules`` with the time its layers begin (:func:`begin`) and the clocks as they were
    then (for :func:`settled`, after a restart)."""
    began_offset, began_boot = offset(), boot_id()
    return attrs.evolve(rules, since=begin(folders), offset=began_offset, boot=began_boot)


def settled(rules: Rules, watch: Watch | None = None) -> tuple[Rules, str | None]:
    """The rules to land with now, and why they changed (``None``: they did not): see the
    module."""
    if not rules.since or not rules.offset:
        return rules, None
    was_set = watch is not None and watch.was_set()
    if was_set or (rules.boot and rules.boot != boot_id()):
        why = "was set" if was_set else "cannot be compared (the machine restarted)"
        return attrs.evolve(rules, since=EVERY), (
            f"the system clock {why} since the command began, so change times cannot tell"
            " whose change came first: every path that both it and something else changed"
            " is kept aside"
        )
    back = rules.offset - offset()
    if back <= TOLERANCE_NS:
        return rules, None
    return attrs.evolve(rules, since=max(EVERY, rules.since - back)), (
        f"the system clock was set back {back / 1e9:.3f} s since the command began: paths"
        " changed that much before it are judged as changed while it ran"
    )


class Watch:
    """Whether the wall clock is set from now on: a ``timerfd`` armed on it, far ahead, with
    ``TFD_TIMER_CANCEL_ON_SET``. Where none can be made, :meth:`was_set` answers ``False``
    and :func:`settled` compares the clocks' offsets instead."""

    def __init__(self) -> None:
        self._fd = _watch()
        self._close = weakref.finalize(self, os.close, self._fd) if self._fd >= 0 else None
        self._set = False  # the kernel says so once (the next read re-arms the watch)

    def was_set(self) -> bool:
        """Whether the wall clock was set since the watch was made."""
        if self._set or self._fd < 0:
            return self._set
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            return False
        except OSError as error:
            self._set = error.errno == errno.ECANCELED
        return self._set

    def close(self) -> None:
        if self._close is not None:
            self._close()
        self._fd = -1  # its number may be another file's from here on


class _Timerspec(ctypes.Structure):
    _fields_ = (
        ("interval_s", ctypes.c_long),
        ("interval_ns", ctypes.c_long),
        ("value_s", ctypes.c_long),
        ("value_ns", ctypes.c_long),
    )


_ABSTIME, _CANCEL_ON_SET = 1, 2
_FAR = 7_258_118_400  # 2200-01-01, in seconds since the epoch


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _watch() -> int:
    """A timerfd cancelled when the wall clock is set (``-1``: none can be made)."""
    libc = _libc()
    fd: int = libc.timerfd_create(time.CLOCK_REALTIME, os.O_CLOEXEC | os.O_NONBLOCK)
    if fd < 0:
        return -1
    spec = _Timerspec(0, 0, _FAR, 0)
    if libc.timerfd_settime(fd, _ABSTIME | _CANCEL_ON_SET, ctypes.byref(spec), None) != 0:
        os.close(fd)
        return -1
    return fd
