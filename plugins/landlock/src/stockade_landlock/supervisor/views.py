"""The command's threads' working directories and umasks, kept between calls while they hold.

Every call with a relative path starts at the caller's working directory (``/proc/TID/cwd``,
opened) and every create needs its umask (``/proc/TID/status``, which the kernel writes out
in full at each read): on a build's hot path, two ``/proc`` opens per create. Both change
only through ``chdir``, ``fchdir`` and ``umask`` (a new thread or process starts with its
parent's, ``exec`` keeps them), so the filter sends those three too (:data:`CHANGES`), and
they are let through at once (``SECCOMP_USER_NOTIF_FLAG_CONTINUE``: the supervisor judges
nothing of them, the kernel reads their argument as it always did). Each empties every view
(threads can share their working directory and umask), and none is kept again until the
thread that made the change is seen again (its next notified call, proof the change is
done). A view belongs to one thread, known by a pidfd of its own (``PIDFD_THREAD``, Linux
6.9): a thread number is reused only once its thread is gone, which the pidfd tells
(``pidfd_send_signal`` with no signal). What a view holds is what ``/proc`` said, so a
wrong view could only give a new file another mode or start a relative path elsewhere: no
rule is judged from it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable

from . import kernel

CHANGES: dict[str, int] = {"chdir": 80, "fchdir": 81, "umask": 95}
"""The calls that change a view (x86_64 numbers): notified, let through, views emptied."""
LIMIT = 64  # threads kept at once (one pidfd and one folder descriptor each)


class View:
    """What one thread's working directory and umask were when last read."""

    def __init__(self, pidfd: int) -> None:
        self.pidfd = pidfd
        self.cwd: int | None = None  # O_PATH, owned here
        self.umask: int | None = None

    def close(self) -> None:
        """Close the descriptors held."""
        os.close(self.pidfd)
        if self.cwd is not None:
            os.close(self.cwd)


class Views:
    """The views of one run's threads (used by the serving thread alone)."""

    def __init__(self) -> None:
        self._views: dict[int, View] = {}
        self._changing: set[int] = set()
        self._lock = threading.Lock()  # stop() closes them from another thread

    def seen(self, tid: int) -> None:
        """Thread ``tid`` made a notified call: a change it made before is done."""
        if self._changing:
            self._changing.discard(tid)

    def changing(self, tid: int) -> None:
        """Thread ``tid`` is changing its working directory or umask: forget every view."""
        self._changing.add(tid)
        self.clear()

    def get(self, tid: int) -> View | None:
        """The view of thread ``tid`` while it holds, or ``None``."""
        if self._changing:
            return None
        view = self._views.get(tid)
        if view is not None and not _alive(view.pidfd):
            with self._lock:
                del self._views[tid]
            view.close()
            return None
        return view

    def make(self, tid: int, still: Callable[[], None]) -> View | None:
        """A new view of thread ``tid`` (``still()`` raises unless its call still waits
        once its pidfd is held), or ``None`` where none may be kept now."""
        if self._changing:
            return None
        try:
            pidfd = kernel.pidfd_thread(tid)
        except OSError:
            return None  # before Linux 6.9: no pidfd of a thread, nothing kept
        try:
            still()
        except BaseException:
            os.close(pidfd)
            raise
        if len(self._views) >= LIMIT:
            self.clear()
        view = View(pidfd)
        with self._lock:
            old = self._views.pop(tid, None)
            self._views[tid] = view
        if old is not None:
            old.close()
        return view

    def clear(self) -> None:
        """Forget (and close) every view."""
        with self._lock:
            views, self._views = self._views, {}
        for view in views.values():
            view.close()


def _alive(pidfd: int) -> bool:
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(pidfd, 0)
        return True
    return False
