"""The executor contract: the one kind of plugin that starts processes.

An executor receives a :class:`~stockade.request.plan.LaunchPlan` and runs it bounded: process
group, timeout with SIGTERM then SIGKILL, capped capture with spill files, nothing left behind. It
gets a synchronous :meth:`Executor.run`; :meth:`Executor.run_async` comes for free and runs
the synchronous one on a thread of its own, aborting it when the awaiting task is cancelled.
"""

from __future__ import annotations

import contextlib
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ..request.plan import LaunchPlan, Probe
from ..request.result import ProcessOutcome

if TYPE_CHECKING:
    import asyncio


class AbortToken:
    """A one-shot cancellation a caller fires to kill a running command.

    The token is pollable: :meth:`fileno` becomes readable once :meth:`abort` is called, so
    an executor can wait on it together with the process's pipes.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)

    def abort(self) -> None:
        """Ask every run using this token to stop (idempotent, thread-safe)."""
        if not self._event.is_set():
            self._event.set()
            os.eventfd_write(self._fd, 1)

    @property
    def aborted(self) -> bool:
        """Whether :meth:`abort` was called."""
        return self._event.is_set()

    def fileno(self) -> int:
        """A descriptor that polls readable once aborted."""
        return self._fd

    def close(self) -> None:
        """Release the descriptor."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()


class Executor(ABC):
    """Runs launch plans. Subclasses set :attr:`PLUGIN_NAME` and implement :meth:`run`.

    Instances are created once per host with the plugin's options from configuration and
    must be safe to call from many threads at once.
    """

    PLUGIN_NAME: ClassVar[str]

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: Mapping[str, Any] = dict(options or {})

    @classmethod
    def probe(cls) -> Probe:
        """Whether this executor can work on this machine (shown by ``stockade doctor``)."""
        return Probe(usable=True, detail="no requirements")

    @abstractmethod
    def run(self, plan: LaunchPlan, *, abort: AbortToken | None = None) -> ProcessOutcome:
        """Run ``plan`` to completion; fire ``abort`` to kill it early."""

    async def run_async(
        self, plan: LaunchPlan, *, abort: AbortToken | None = None
    ) -> ProcessOutcome:
        """Run ``plan`` without blocking the loop; cancelling the task kills the command.

        The run gets a thread of its own (not the loop's bounded default pool), so a hundred
        concurrent awaits are a hundred concurrent commands.
        """
        import asyncio  # not at the top: asyncio costs more to import than a CLI run

        token = abort if abort is not None else AbortToken()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[ProcessOutcome] = loop.create_future()

        def settle(outcome: ProcessOutcome | None, error: BaseException | None) -> None:
            if done.cancelled():
                return
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(outcome)  # type: ignore[arg-type]

        def work() -> None:
            try:
                outcome = self.run(plan, abort=token)
            except BaseException as error:  # noqa: BLE001 - handed to the awaiting task
                _deliver(loop, settle, None, error)
            else:
                _deliver(loop, settle, outcome, None)

        threading.Thread(target=work, name="stockade-run", daemon=True).start()
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            token.abort()
            # The command is being killed; wait for the kill to finish before re-raising.
            await asyncio.wait([done])
            raise

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release what the executor holds (helper processes, directories)."""


def _deliver(
    loop: asyncio.AbstractEventLoop,
    settle: Callable[[ProcessOutcome | None, BaseException | None], None],
    outcome: ProcessOutcome | None,
    error: BaseException | None,
) -> None:
    # A closed loop (RuntimeError) means nobody is waiting for the outcome any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(settle, outcome, error)
