"""The command's threads' umasks, kept between calls while they hold.

Every create needs the caller's umask, from ``/proc/TID/status``, which the kernel writes
out in full at each read: on a build's hot path, a ``/proc`` open and a long read per
create. A umask changes only through ``umask`` (a new thread or process starts with its
parent's, ``exec`` keeps it), so the filter sends that call too (:data:`CHANGES`), and it
is let through at once (``SECCOMP_USER_NOTIF_FLAG_CONTINUE``: the supervisor judges nothing
of it, the kernel reads its argument, a register). Each empties every view (threads can
share their umask), and none is kept again until the thread that made the change is seen
again (its next notified call, proof the change is done). A view belongs to one thread,
known by a pidfd of its own (``PIDFD_THREAD``, Linux 6.9): a thread number is reused only
once its thread is gone, which the pidfd tells (``pidfd_send_signal`` with no signal). What
a view holds is what ``/proc`` said, so a wrong view could only give a new file another
mode: no rule is judged from it.

From a thread's second call that needed its working directory or a descriptor, its view
also keeps its ``/proc/TID`` folder (``O_PATH``), through which the next ones are opened:
that folder stays with the thread it was opened for (:meth:`.resolve.Caller._task`), so an
open through it proves the thread alive and the caller, and the pidfd is not asked then.

The working directory is not kept so: ``chdir`` would have to be sent to the supervisor as
well, and the child that ``subprocess`` starts with ``vfork`` calls ``chdir`` before its
``exec``, while its parent, the spawning thread, holds the interpreter's lock until that
``exec`` (CPython before 3.11.6 and 3.12): the supervisor, a thread of the same interpreter,
could never answer it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

from . import kernel

CHANGES: dict[str, int] = {"umask": 95}
"""The calls that change a view (x86_64 numbers): notified, let through, views emptied."""
LIMIT = 64  # threads kept at once (one pidfd each)


class View:
    """What one thread's umask was when last read, and its ``/proc/TID`` folder."""

    def __init__(self, pidfd: int) -> None:
        self.pidfd = pidfd
        self.umask: int | None = None
        self.task: int | None = None  # /proc/TID of this thread (O_PATH), see Caller.task

    def close(self) -> None:
        """Close the descriptors held."""
        os.close(self.pidfd)
        if self.task is not None:
            os.close(self.task)


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
        """Thread ``tid`` is changing its umask: forget every view."""
        self._changing.add(tid)
        self.clear()

    def get(self, tid: int, *, alive: bool = False) -> View | None:
        """The view of thread ``tid`` while it holds, or ``None``. ``alive``: the caller
        knows the view's own thread is alive (see :meth:`.resolve.Caller.task`), so it is
        the thread ``tid`` names (no other can hold its number meanwhile)."""
        if self._changing:
            return None
        view = self._views.get(tid)
        if view is not None and not alive and not _alive(view.pidfd):
            self.drop(tid, view)
            return None
        return view

    def find(self, tid: int) -> View | None:
        """The view kept for thread ``tid``, unchecked: its thread may be gone, and
        another may hold its number now (for :meth:`.resolve.Caller.task`)."""
        return None if self._changing else self._views.get(tid)

    def drop(self, tid: int, view: View) -> None:
        """Forget ``view``, kept for ``tid``, whose thread is gone."""
        with self._lock:
            if self._views.get(tid) is not view:
                return
            del self._views[tid]
        view.close()

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
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except ProcessLookupError:
        return False
    return True
