"""Running without leaking: progress while a call waits, cancellation that waits for the
kill, and a standard input a signal can interrupt."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import anyio
from mcp.server.context import ServerRequestContext
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params

from stockade.run.executor import AbortToken

T = TypeVar("T")
Context = ServerRequestContext[Any, Any]

logger = logging.getLogger("stockade_mcp")

PROGRESS_EVERY = 1.0
"""Seconds between two progress notifications of a running command."""


async def with_progress(ctx: Context, work: Awaitable[T]) -> T:
    """Await ``work``; meanwhile, when the client asked for progress, report the seconds
    elapsed every :data:`PROGRESS_EVERY` seconds."""
    if progress_token_from_params(ctx.params) is None:
        return await work
    started = time.monotonic()

    async def tick() -> None:
        while True:
            await anyio.sleep(PROGRESS_EVERY)
            elapsed = time.monotonic() - started
            try:
                await ctx.session.report_progress(elapsed, None, f"running for {elapsed:.0f} s")
            except Exception:
                logger.debug("a progress notification was not sent", exc_info=True)

    # A plain task, not a task group's: an error of ``work`` propagates as itself.
    ticker = asyncio.ensure_future(tick())
    try:
        return await work
    finally:
        ticker.cancel()


async def settle_task(work: Coroutine[Any, Any, T]) -> T:
    """Await ``work`` as a task of its own; when the caller is cancelled, cancel it once
    and wait until it has finished (for a command: until it was killed), then re-raise.

    The SDK cancels a handler through anyio, which cancels again at every await inside the
    cancelled scope; the task of its own sees a single, plain asyncio cancellation, so its
    clean-up (killing the command, closing the record) runs to its end.
    """
    task = asyncio.ensure_future(work)
    return await _settle(task, task.cancel)


async def settle_thread(work: Callable[[], T], token: AbortToken) -> T:
    """Run ``work`` on a thread; when the caller is cancelled, abort ``token`` and wait for
    the thread to finish, then re-raise."""
    future = asyncio.get_running_loop().run_in_executor(None, work)
    return await _settle(future, token.abort)


async def _settle(future: asyncio.Future[T], stop: Callable[[], object]) -> T:
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        stop()
        with anyio.CancelScope(shield=True):
            await asyncio.wait([future])
        if not future.cancelled():
            future.exception()  # retrieved: the caller's cancellation is what propagates
        raise


class StdinLines:
    """The lines of standard input, read without a thread, so a signal can end the server.

    The SDK's transport reads stdin on a worker thread that nothing can interrupt: a
    server told to stop would wait for the client's next line. This reader waits for fd 0
    to be readable in the event loop instead, from a private duplicate; fd 0 itself then
    points at the null device, as the SDK would make it.
    """

    def __init__(self) -> None:
        import fcntl

        self._fd = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
        os.set_blocking(self._fd, False)
        self._buffer = b""
        self._eof = False

    @staticmethod
    def pollable() -> bool:
        """Whether stdin is a pipe or a socket, as a client makes it.

        A regular file cannot be polled, and a terminal is left alone: it would be made
        non-blocking for the shell that shares it.
        """
        import stat

        try:
            mode = os.fstat(0).st_mode
        except OSError:
            return False
        return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        while b"\n" not in self._buffer:
            if self._eof:
                if not self._buffer:
                    raise StopAsyncIteration
                line, self._buffer = self._buffer, b""
                return line.decode("utf-8", "replace")
            await anyio.wait_readable(self._fd)
            try:
                chunk = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                continue
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", "replace") + "\n"

    def close(self) -> None:
        """Point fd 0 back at the real stdin."""
        if self._fd >= 0:
            os.set_blocking(self._fd, True)
            os.dup2(self._fd, 0)
            os.close(self._fd)
            self._fd = -1
