"""A thread's kept ``/proc/TID`` folder (the supervisor's views) never answers for another
thread: once the thread it was opened for is gone, the caller that now holds the number
gets its own working directory and umask, never the canary's the view kept.

A number is reused only after its thread is gone, which a test cannot force (the kernel
hands numbers out in turn), so the view is planted by hand: kept under a live thread's
number, but holding a second thread's folder, pidfd and umask. While that second thread
lives the view answers with its canary folder (the control: the test sees a view that
answers for the wrong thread); once it is gone, the caller's own folder and umask come
back, and the view is dropped. A supervisor that kept the working directory's descriptor
itself, instead of the thread's folder, would still answer with the canary.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from stockade_landlock import supervisor

pytestmark = pytest.mark.skipif(supervisor.unavailable() is not None, reason="no supervisor")


class _Parked:
    """A thread with a working directory and umask of its own, parked until released."""

    def __init__(self, folder: Path, umask: int) -> None:
        from stockade_landlock.supervisor import kernel

        self.tid = 0
        self._jobs: queue.Queue[Callable[[], object] | None] = queue.Queue()
        self._done: queue.Queue[object] = queue.Queue()

        def run() -> None:
            kernel.own_fs()  # cwd and umask of this thread alone
            os.chdir(folder)
            os.umask(umask)
            self.tid = threading.get_native_id()
            self._done.put(None)
            while (job := self._jobs.get()) is not None:
                self._done.put(job())

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        self._done.get(timeout=30)

    def do(self, job: Callable[[], object]) -> None:
        """Run ``job`` on the thread."""
        self._jobs.put(job)
        self._done.get(timeout=30)

    def end(self) -> None:
        if not self._thread.is_alive():
            return
        self._jobs.put(None)
        self._thread.join(30)
        for _ in range(1000):  # joined, then reaped by the kernel a moment later
            if not os.path.exists(f"/proc/{self.tid}"):
                return
            threading.Event().wait(0.005)


@pytest.fixture
def threads(tmp_path: Path) -> Iterator[Callable[[str, int], _Parked]]:
    made: list[_Parked] = []

    def make(name: str, umask: int) -> _Parked:
        (tmp_path / name).mkdir()
        parked = _Parked(tmp_path / name, umask)
        made.append(parked)
        return parked

    yield make
    for parked in made:
        parked.end()


def _caller(tid: int, views: object, monkeypatch: pytest.MonkeyPatch) -> object:
    from stockade_landlock.supervisor.resolve import Caller

    # No notification waits here: the plain way's NOTIF_ID_VALID is taken as passed (the
    # caller's thread is alive, parked).
    monkeypatch.setattr(Caller, "still", lambda self: None)
    return Caller(-1, 0, tid, views=views)  # type: ignore[arg-type]


def test_a_kept_thread_folder_never_answers_for_the_thread_now_holding_its_number(
    threads: Callable[[str, int], _Parked], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from stockade_landlock.supervisor import kernel
    from stockade_landlock.supervisor.resolve import where
    from stockade_landlock.supervisor.views import View, Views

    caller_thread = threads("mine", 0o027)
    canary_thread = threads("canary", 0o077)
    views = Views()
    planted = View(kernel.pidfd_thread(canary_thread.tid))
    planted.umask = 0o077
    planted.task = os.open(f"/proc/{canary_thread.tid}", os.O_PATH | os.O_DIRECTORY)
    views._views[caller_thread.tid] = planted  # kept under the caller's number
    try:
        control = _caller(caller_thread.tid, views, monkeypatch)
        try:  # the canary's thread lives: the view answers, with the canary's folder
            assert where(control._opened("cwd")) == str(tmp_path / "canary")
            assert control.umask() == 0o077
        finally:
            control.close()

        canary_thread.end()  # its number could now be anyone's
        attack = _caller(caller_thread.tid, views, monkeypatch)
        try:
            assert where(attack._opened("cwd")) == str(tmp_path / "mine")
            assert attack.umask() == 0o027  # read again, not the view's
        finally:
            attack.close()
        assert views.find(caller_thread.tid) is not planted  # dropped, closed
    finally:
        views.clear()


def test_the_view_keeps_the_thread_folder_from_its_second_call_and_follows_a_chdir(
    threads: Callable[[str, int], _Parked], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from stockade_landlock.supervisor.resolve import where
    from stockade_landlock.supervisor.views import Views

    parked = threads("first", 0o022)
    views = Views()
    try:
        seen = []
        for _ in range(3):
            caller = _caller(parked.tid, views, monkeypatch)
            try:
                seen.append(where(caller._opened("cwd")))
                caller.umask()
            finally:
                caller.close()
        view = views.find(parked.tid)
        assert view is not None and view.task is not None
        assert seen == [str(tmp_path / "first")] * 3
        # The folder kept is the thread's, not its working directory: a chdir and a
        # rename show at once.
        (tmp_path / "second").mkdir()
        parked.do(lambda: os.chdir(tmp_path / "second"))
        os.rename(tmp_path / "second", tmp_path / "moved")
        caller = _caller(parked.tid, views, monkeypatch)
        try:
            assert where(caller._opened("cwd")) == str(tmp_path / "moved")
        finally:
            caller.close()
    finally:
        views.clear()
