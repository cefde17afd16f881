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
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

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
change stamped in the same second, before or after, is a conflict. A wall clock set back
while the command runs can still hide an edit from the check, as it would any time-based
one."""


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
