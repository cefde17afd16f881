"""Workspace quotas: an agent's folder holds at most ``quota_mb``, measured while it runs.

A profile's ``quota_mb`` bounds the disk its workspace takes: the bytes allocated to its
files (``st_blocks``, as ``du`` counts them; a sparse file costs what it holds, a hard link
is counted once), symlinks not followed. No file-system quota is needed, so it works for
any folder and any user:

- **while a command runs**, a thread measures the workspace again and again (every
  ``interval`` seconds, and never more often than five times what one measure costs, so a
  big tree is not walked back to back) and stops the command the moment it holds more
  than it may: the result says ``limit_hit = "quota"``. What a command can write between
  two measures (its write rate times the interval) is how far it can overshoot.
- **a workspace already over its quota** takes no more: a command may still run (to remove
  files, say), but any growth at all stops it, and
  :meth:`stockade.workspace.files.Workspace.file_write`
  refuses a write that would not fit.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from typing import TYPE_CHECKING

from ..errors import StockadeError
from ..trees import TRIES, again

if TYPE_CHECKING:
    from .executor import AbortToken

MIB = 1024 * 1024


class QuotaExceeded(StockadeError):
    """The workspace holds its whole quota: the write was refused, nothing changed."""

    code = "quota_exceeded"


class Unmeasured(StockadeError):
    """No measure counted the whole workspace: a folder moved while each was taken, or it
    holds what the host may not look at (a folder made ``600``). Taken as over the quota (a
    command would otherwise hide from it what lies there)."""

    code = "quota_exceeded"


def usage(folder: str) -> int:
    """The bytes allocated to the files under ``folder``, each inode once; walked through
    folder descriptors without following a link
    (:func:`stockade.workspace.folders.statuses`), so a folder the command swaps for a link
    while it is counted cannot add the sizes of files outside ``folder``; measured again
    when one was cut short (:func:`stockade.trees.again`).

    Raises:
        Unmeasured: no measure of :data:`~stockade.trees.TRIES` counted the whole tree.
    """
    from ..workspace.folders import statuses

    def count() -> int:
        seen: set[tuple[int, int]] = set()
        total = 0
        for info in statuses(folder, strict=True):
            if info.st_nlink > 1:
                key = (info.st_dev, info.st_ino)
                if key in seen:
                    continue
                seen.add(key)
            total += info.st_blocks * 512
        return total

    try:
        return again(count)
    except OSError as error:  # cut short each time: a folder moved, or what it cannot see
        raise Unmeasured(
            f"{folder} could not be measured whole for its quota, {TRIES} times "
            f"({error.strerror}: a folder moved while each measure was taken, or something "
            "there may not be looked at): it counts as over its quota",
            hint="give the workspace's folders back their rights (chmod u+rwx), and let "
            "nothing move folders in it while a command runs under a quota",
            details={"folder": folder},
        ) from None


def describe(used: int, limit: int) -> str:
    """``12.5 MiB of its 10 MiB quota``."""
    return f"{used / MIB:.1f} MiB of its {limit / MIB:g} MiB quota"


class Watch:
    """Measures ``folder`` while a command runs; fires ``stop`` when it goes over.

    Args:
        folder: the workspace.
        limit: its quota, in bytes.
        stop: the token that stops the command, fired once when the workspace is over.
        forward: the caller's own token: when it fires, ``stop`` is fired too.
        interval: seconds between measures (at least).

    Attributes:
        start: the bytes it held when the watch began.
        used: the bytes it held at the last measure.
        exceeded: whether ``stop`` was called.
    """

    def __init__(
        self,
        folder: str,
        limit: int,
        stop: AbortToken,
        *,
        forward: AbortToken | None = None,
        interval: float = 0.1,
    ) -> None:
        self.folder = folder
        self.limit = limit
        self._stop = stop
        self._forward = forward
        self.interval = interval
        began = time.monotonic()
        self.start = self.used = usage(folder)
        self._cost = time.monotonic() - began
        # Over already: nothing more may be added; under: up to the quota.
        self.allowed = max(limit, self.start)
        self.exceeded = False
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC)
        self._thread = threading.Thread(target=self._watch, name="stockade-quota", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while True:
            pause = max(self.interval, 5 * self._cost)
            watched = [self._wake_r]
            if self._forward is not None:
                watched.append(self._forward.fileno())
            ready, _, _ = select.select(watched, [], [], pause)
            if self._wake_r in ready:
                return
            if ready:  # the caller aborted
                self._stop.abort()
                return
            began = time.monotonic()
            try:
                self.used = usage(self.folder)
            except Unmeasured:
                self.used = self.allowed + 1  # fails closed: taken as over
            self._cost = time.monotonic() - began
            if self.used > self.allowed:
                self.exceeded = True
                self._stop.abort()
                return

    def finish(self) -> None:
        """Stop watching and take the last measure."""
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        self._thread.join()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        try:
            self.used = usage(self.folder)
        except Unmeasured:
            self.used = self.allowed + 1
        if self.used > self.allowed:
            self.exceeded = True
