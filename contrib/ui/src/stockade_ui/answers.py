"""A person's answers from the page: the same as ``stockade approve`` and ``decline``.

When the user's warm server runs (and passes the client's checks), a step let go ahead is
approved and run through it, as ``stockade approve`` is (:func:`stockade.cli.client.served`):
its record is the same, the files it changed included (the server's kept watch lists them).
Otherwise each answer gets a host of its own, as each in-process ``stockade approve`` does,
so a step let go ahead runs with a fresh run home, exactly as the store kept it. The
answer is recorded at once (the store's conditional update: a second click, or another
process, finds it already answered and is told so); the step then runs on a thread of its
own, off the event loop, and its result reaches the page through the record like any other
step's. Stopping the page aborts the steps it started and waits for them to end.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Mapping

from attrs import frozen

from stockade.errors import StockadeError
from stockade.host import Host
from stockade.record.store import HeldStep
from stockade.run.executor import AbortToken

from .timeline import shown_digest


@frozen
class Notice:
    """What the page tells a person after an answer.

    Attributes:
        tone: ``ok`` or ``bad``.
        text: the message.
    """

    tone: str
    text: str


class Answers:
    """Answers held steps and runs the approved ones, one thread each."""

    def __init__(self, config_path: str | None, environ: Mapping[str, str] | None = None) -> None:
        self.config_path = config_path
        self.environ = dict(os.environ if environ is None else environ)
        self._lock = threading.Lock()
        self._running: dict[tuple[str, int], tuple[threading.Thread, AbortToken | _Remote]] = {}
        self.problems: dict[tuple[str, int], str] = {}
        """Why a step this page let go ahead could not run (nothing else records it)."""

    def by(self) -> str:
        """Who answers, as the record names them."""
        from stockade.policy.prompt import user_name

        return f"{user_name()} (stockade ui)"

    def answer(self, run_id: str, step: int, *, approve: bool, shown: str) -> Notice:
        """Approve (and start) or decline ``run_id``/``step``, if it still is what the page
        showed as ``shown`` (:func:`~stockade_ui.timeline.shown_digest`)."""
        try:
            host = Host.from_environment(self.config_path, environ=self.environ)
        except StockadeError as error:
            return Notice("bad", error.message)
        try:
            held = host.store.get(run_id, step)
            said: Notice | None = None
            if shown_digest(held) != shown:
                said = Notice(
                    "bad",
                    f"step {step} of run {run_id} is not what the page showed: nothing was "
                    "answered; look at it again",
                )
            elif held.state != "held":
                said = Notice("bad", _already(held))
            elif approve:
                said = self._through_server(run_id, step)  # None: no server runs
            if said is not None:
                host.close()
                return said
            held = host.answer(run_id, step, approve=approve, by=self.by())
        except StockadeError as error:  # another process answered in between, or no store
            host.close()
            return Notice("bad", f"{error.message}: this answer changed nothing")
        if not approve:
            host.close()
            return Notice("ok", f"step {step} declined by {held.answered_by}: it will not run")
        self._start(host, run_id, step)
        return Notice("ok", f"step {step} let go ahead by {held.answered_by}: it runs now")

    def _through_server(self, run_id: str, step: int) -> Notice | None:
        """Approve and run the step through the warm server, as ``stockade approve`` does;
        ``None`` when no server runs. The notice comes once the answer is recorded (the
        server says so first), or the call ended without it; the step runs on."""
        from stockade.cli.client import served

        said: queue.Queue[tuple[str, object]] = queue.Queue()
        abort = _Remote()

        def out(fd: int, text: str) -> None:
            said.put(("out", text) if fd == 2 else ("stdout", text))

        def started(interrupt: Callable[[], None]) -> None:
            abort.started(interrupt)

        def call() -> None:
            try:
                argv = ["approve", "--via", "ui", run_id, str(step)]
                if self.config_path is not None:
                    argv = ["--config", self.config_path, *argv]
                status = served(
                    argv, environ=self.environ, cwd=os.getcwd(), out=out, started=started
                )
                said.put(("end", status))
            finally:
                with self._lock:
                    self._running.pop((run_id, step), None)
                    abort.close()

        thread = threading.Thread(target=call, name=f"ui-{run_id}-{step}")
        with self._lock:
            self.problems.pop((run_id, step), None)
            self._running[(run_id, step)] = (thread, abort)
        thread.start()
        while True:
            kind, value = said.get()
            if kind == "end":
                if value is None:
                    return None  # no server: in-process, as before
                return Notice("bad", "the server ended the call before it answered")
            if kind == "out":
                text = str(value)
                if text.startswith("stockade: approved by "):
                    by = text.removeprefix("stockade: approved by ").split(":\n", 1)[0]
                    return Notice("ok", f"step {step} let go ahead by {by}: it runs now")
                if text.startswith("stockade: error["):
                    message = text.split("]: ", 1)[-1].splitlines()[0]
                    return Notice("bad", f"{message}: this answer changed nothing")

    def resume(self, run_id: str, step: int) -> Notice:
        """Run ``run_id``/``step``, approved earlier but not run (its workspace was busy)."""
        try:
            host = Host.from_environment(self.config_path, environ=self.environ)
            held = host.store.get(run_id, step)
        except StockadeError as error:
            return Notice("bad", error.message)
        if held.state != "approved":
            host.close()
            return Notice("bad", f"step {step} of run {run_id} is {held.state}: it runs once")
        self._start(host, run_id, step)
        return Notice("ok", f"step {step} runs now")

    def _start(self, host: Host, run_id: str, step: int) -> None:
        abort = AbortToken()
        thread = threading.Thread(
            target=self._run, args=(host, run_id, step, abort), name=f"ui-{run_id}-{step}"
        )
        with self._lock:
            self.problems.pop((run_id, step), None)
            self._running[(run_id, step)] = (thread, abort)
        thread.start()

    def _run(self, host: Host, run_id: str, step: int, abort: AbortToken) -> None:
        try:
            host.resume(run_id, step, abort=abort)
        except StockadeError as error:
            # Recorded already when it ran and failed; not when it could not start (a busy
            # workspace, another process running it): the page says so.
            with self._lock:
                self.problems[(run_id, step)] = error.message
        finally:
            host.close()
            with self._lock:  # close() aborts only what is still listed, under this lock
                self._running.pop((run_id, step), None)
                abort.close()

    def problems_of(self, run_id: str) -> dict[int, str]:
        """Why steps of ``run_id`` this page let go ahead could not run, by step."""
        with self._lock:
            return {step: text for (run, step), text in self.problems.items() if run == run_id}

    def running(self) -> int:
        """How many steps this page started are still running."""
        with self._lock:
            return len(self._running)

    def close(self, timeout: float = 30.0) -> None:
        """Abort the steps still running and wait for them to end."""
        with self._lock:
            running = list(self._running.values())
            for _thread, abort in running:
                abort.abort()
        for thread, _abort in running:
            thread.join(timeout)


class _Remote:
    """Stops a step the server runs for the page, as Ctrl-C at ``stockade approve`` would."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._interrupt: Callable[[], None] | None = None
        self._aborted = False

    def started(self, interrupt: Callable[[], None]) -> None:
        with self._lock:
            self._interrupt = interrupt
            aborted = self._aborted
        if aborted:
            interrupt()

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            interrupt = self._interrupt
        if interrupt is not None:
            interrupt()

    def close(self) -> None:
        """Nothing to release."""


def _already(held: HeldStep) -> str:
    """Why a second answer to ``held`` changes nothing."""
    how = "declined" if held.state == "declined" else "let go ahead"
    by = f" by {held.answered_by}" if held.answered_by else ""
    return (
        f"step {held.step} of run {held.run_id} was already answered ({how}{by}); this "
        "answer changed nothing: a step runs at most once"
    )
