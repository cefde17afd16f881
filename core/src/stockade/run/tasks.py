"""Background tasks: a command that runs while the agent goes on, read as it prints.

:meth:`stockade.host.Host.start` admits a command the way :meth:`~stockade.host.Host.run`
does, on the caller's thread: a denial or a held step is raised right there. Then it runs
on a thread of its own. The agent reads what it printed since its previous read with
:meth:`Tasks.read`, and kills it with :meth:`Tasks.kill`.

- **Owners.** Every call names an owner token, and an owner sees only its own tasks. A
  task of another owner is reported exactly like one that does not exist, so a task's id
  says nothing to whoever does not own it. The token is only compared, never interpreted,
  and it never reaches the executor.
- **Unread output** is kept up to ``buffer`` bytes per stream. When a command prints
  faster than it is read, the oldest unread bytes are dropped, and the next read says
  ``lossy`` with how many bytes were dropped. The whole stream is still in the result, and
  in the spill file once the task has ended.
- **Secrets.** Credential values given to the command never appear in what is read. Each
  read is scrubbed of every form of every secret, and while the task runs, the last bytes
  (as many as the longest form) are held back, so that a value printed across two reads
  is still scrubbed.
- **Limits.** An owner may have ``per_owner`` tasks running at once. Ended tasks are kept
  (for their output and result) until the owner has more than ``keep`` of them; then the
  oldest are forgotten.
- **Nothing outlives the host.** :meth:`Tasks.close` kills every task and waits for each.
"""

from __future__ import annotations

import codecs
import itertools
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from attrs import field, frozen

from ..errors import StockadeError
from ..request.result import RunResult  # at run time: the wire format reads TaskInfo's types
from .executor import AbortToken

TaskStatus = Literal["running", "completed", "killed", "failed"]
STREAMS = ("stdout", "stderr")


class UnknownTask(StockadeError):
    """No task of this owner has that id (a task of another owner has none either)."""

    code = "unknown_task"


class TooManyTasks(StockadeError):
    """The owner has as many tasks running as it may; this one was not started."""

    code = "too_many_tasks"


@frozen
class TaskInfo:
    """A background task, as its owner sees it.

    Attributes:
        task_id: ``task-N``, unique within the host.
        argv: the argv as requested.
        status: ``running``; ``completed`` (it ended on its own: any exit status, a
            timeout, a limit); ``killed`` (by :meth:`Tasks.kill` or the host's close); or
            ``failed`` (it could not be run: the error says why).
        exit_code: its exit status, once ended; ``None`` when a signal ended it.
        signal: the signal that ended it, if one did.
        started: when it started (seconds since the epoch).
        result: the whole result, once ended.
        error: the error (as ``StockadeError.to_dict()``) when it failed.
        action_id: its command's action id (names its layers while it runs: a file tool
            reads its view by it, :mod:`stockade.layers.view`).
    """

    task_id: str
    argv: tuple[str, ...]
    status: TaskStatus
    exit_code: int | None = field(kw_only=True, default=None)
    signal: str | None = field(kw_only=True, default=None)
    started: float = field(kw_only=True, default=0.0)
    result: RunResult | None = field(kw_only=True, default=None)
    error: Mapping[str, Any] | None = field(kw_only=True, default=None)
    action_id: str = field(kw_only=True, default="")


@frozen
class TaskOutput:
    """What a task printed since its owner's previous read.

    Attributes:
        task_id: the task.
        stdout: standard output since the previous read, decoded as UTF-8.
        stderr: standard error since the previous read.
        lossy: unread bytes were dropped since the previous read (the buffer was full).
        dropped_bytes: how many.
        status: the task's status at this read; once it is not ``running``, this read
            holds everything up to the end.
        info: the task.
        spill: each stream's spill file holding the whole stream, once the task ended with
            more output than the result keeps (``None`` otherwise).
    """

    task_id: str
    stdout: str
    stderr: str
    lossy: bool = field(kw_only=True)
    dropped_bytes: int = field(kw_only=True)
    status: TaskStatus = field(kw_only=True)
    info: TaskInfo = field(kw_only=True)
    spill: Mapping[str, str | None] = field(kw_only=True, factory=dict)


Runner = Callable[[AbortToken, Callable[[str, bytes], None]], "RunResult"]
"""Runs an admitted command to its end: ``runner(abort, on_output)``."""


class _Task:
    def __init__(
        self,
        task_id: str,
        owner: str,
        argv: tuple[str, ...],
        buffer: int,
        secrets: tuple[str, ...],
        *,
        action_id: str = "",
    ) -> None:
        from ..record.redact import all_forms

        self.task_id, self.owner, self.argv = task_id, owner, argv
        self.secrets, self.action_id = secrets, action_id
        hold = max((len(f.encode()) for f in all_forms(secrets)), default=0)
        self.token = AbortToken()
        self.started = time.time()
        self.buffer, self.hold = buffer, hold
        self.unread = {name: bytearray() for name in STREAMS}
        self.decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in STREAMS}
        self.dropped = 0
        self.killed = False
        self.result: RunResult | None = None
        self.error: StockadeError | None = None
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def feed(self, stream: str, chunk: bytes) -> None:
        with self.lock:
            unread = self.unread[stream]
            unread += chunk
            over = len(unread) - self.buffer
            if over > 0:
                del unread[:over]
                self.dropped += over

    def info(self) -> TaskInfo:
        result, error = self.result, self.error
        if not self.done.is_set():
            status: TaskStatus = "running"
        elif error is not None:
            status = "failed"
        else:
            status = "killed" if self.killed else "completed"
        return TaskInfo(
            self.task_id,
            self.argv,
            status,
            exit_code=result.exit_code if result is not None else None,
            signal=result.signal if result is not None else None,
            started=self.started,
            result=result,
            error=error.to_dict() if error is not None else None,
            action_id=self.action_id,
        )


class Tasks:
    """The background tasks of one host.

    Args:
        per_owner: tasks an owner may have running at once.
        buffer: unread bytes kept per stream of a task.
        keep: ended tasks kept per owner (the oldest beyond it are forgotten).
    """

    def __init__(self, *, per_owner: int = 16, buffer: int = 1 << 20, keep: int = 64) -> None:
        self.per_owner, self.buffer, self.keep = per_owner, buffer, keep
        self._tasks: dict[str, _Task] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._listeners: list[Callable[[TaskInfo], None]] = []
        self._closed = False

    def running(self) -> int:
        """How many tasks, of any owner, are running now."""
        with self._lock:
            return sum(1 for task in self._tasks.values() if not task.done.is_set())

    def start(
        self,
        owner: str,
        argv: tuple[str, ...],
        runner: Runner,
        secrets: tuple[str, ...] = (),
        action_id: str = "",
    ) -> TaskInfo:
        """Run ``runner`` (the command ``action_id``) on a thread of its own, as a task of
        ``owner``.

        Raises:
            TooManyTasks: ``owner`` has ``per_owner`` tasks running.
            UsageError: the host is closed.
        """
        with self._lock:
            if self._closed:
                from ..errors import UsageError

                raise UsageError("the host is closed; it starts no more tasks")
            running = [t for t in self._tasks.values() if t.owner == owner and not t.done.is_set()]
            if len(running) >= self.per_owner:
                raise TooManyTasks(
                    f"{len(running)} tasks are running, as many as one owner may have",
                    hint="read or kill one (list_commands shows them), then start this one",
                    details={"running": len(running), "limit": self.per_owner},
                )
            task = _Task(
                f"task-{next(self._ids)}", owner, argv, self.buffer, secrets, action_id=action_id
            )
            self._tasks[task.task_id] = task
            self._forget_old(owner)
        task.thread = threading.Thread(
            target=self._work, args=(task, runner), name=f"stockade-{task.task_id}", daemon=True
        )
        task.thread.start()
        return task.info()

    def _work(self, task: _Task, runner: Runner) -> None:
        try:
            task.result = runner(task.token, task.feed)
        except StockadeError as error:
            task.error = error
        except BaseException as error:  # noqa: BLE001 - reported as the task's failure
            task.error = StockadeError(f"the task failed: {error!r}")
        finally:
            task.done.set()
            task.token.close()
        info = task.info()
        for listener in list(self._listeners):
            try:
                listener(info)
            except Exception as error:  # noqa: BLE001 - one listener must not stop the rest
                import sys

                print(f"stockade: warning: a task listener failed: {error!r}", file=sys.stderr)

    def read(self, owner: str, task_id: str) -> TaskOutput:
        """What the task printed since the previous read (everything, once it ended).

        Raises:
            UnknownTask: ``owner`` has no task ``task_id``.
        """
        task = self._get(owner, task_id)
        ended = task.done.is_set()
        secrets = task.secrets
        with task.lock:
            texts = {}
            for name in STREAMS:
                unread = task.unread[name]
                keep = 0 if ended else min(task.hold, len(unread))
                take = bytes(unread[: len(unread) - keep])
                del unread[: len(take)]
                texts[name] = task.decoders[name].decode(take, final=ended)
            dropped, task.dropped = task.dropped, 0
        if secrets:
            from ..record.redact import scrub

            texts = {name: scrub(text, secrets) for name, text in texts.items()}
        info = task.info()
        result = info.result
        spill = (
            {"stdout": result.stdout.spill_path, "stderr": result.stderr.spill_path}
            if result is not None
            else {}
        )
        return TaskOutput(
            task_id,
            texts["stdout"],
            texts["stderr"],
            lossy=dropped > 0,
            dropped_bytes=dropped,
            status=info.status,
            info=info,
            spill=spill,
        )

    def kill(self, owner: str, task_id: str, *, wait: float | None = None) -> TaskInfo:
        """Kill the task (everything it started) and wait until it has ended.

        Raises:
            UnknownTask: ``owner`` has no task ``task_id``.
        """
        task = self._get(owner, task_id)
        if not task.done.is_set():
            task.killed = True
            task.token.abort()
        task.done.wait(wait)
        return task.info()

    def list(self, owner: str) -> list[TaskInfo]:
        """``owner``'s tasks, oldest first."""
        with self._lock:
            tasks = [t for t in self._tasks.values() if t.owner == owner]
        return [t.info() for t in tasks]

    def on_done(self, listener: Callable[[TaskInfo], None]) -> None:
        """Call ``listener(info)`` when any task ends (from the task's thread)."""
        self._listeners.append(listener)

    def close(self) -> None:
        """Kill every task and wait for each to end."""
        with self._lock:
            self._closed = True
            tasks = list(self._tasks.values())
        for task in tasks:
            if not task.done.is_set():
                task.killed = True
                task.token.abort()
        for task in tasks:
            if task.thread is not None:
                task.thread.join()

    def _get(self, owner: str, task_id: str) -> _Task:
        with self._lock:
            task = self._tasks.get(task_id)
        if task is None or task.owner != owner:
            raise UnknownTask(
                f"no task {task_id!r}",
                hint="list_commands shows this session's tasks",
                details={"task_id": task_id},
            )
        return task

    def _forget_old(self, owner: str) -> None:
        ended = [t for t in self._tasks.values() if t.owner == owner and t.done.is_set()]
        for task in ended[: max(0, len(ended) - self.keep)]:
            del self._tasks[task.task_id]
