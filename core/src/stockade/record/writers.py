"""The sharded record's writers: processes of the driver's own, fed batches through pipes.

A :class:`ShardedRecord` has ``count`` shard chains (:mod:`stockade.record.shards`), each
with its own store and signing key beside the main store, written in parallel by as many
writer processes as this process may run on CPUs at once (never more than the shards: four
shards on two cores are two processes of two chains each). Each writer is a child of this
process (``python -m stockade.record.writer``), so it always runs on this machine, beside
the main store that names its shards, and it ends when this process does: its only input
is a pipe that this process alone holds.

The driver sends a writer a batch as one frame on that pipe and goes on; it reads the
writer's answers, in order, when it waits for them (:meth:`ShardedRecord.wait`). A writer
that fails a batch answers with the error, and the batch's waiter gets it as a
:class:`~stockade.record.store.StoreError`; a writer that dies fails every batch it had
not answered, and every later one.

Why not Ray actors, as before: a Ray call costs each side about 0.6 ms of CPU, about a
third of what sharding gains on two cores, and a writer process scheduled per core rather
than per shard stops four writers taking turns on two cores (``docs/scale-out.md``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .events import AnchorEvent
from .shards import head_of, shard_path
from .store import Store, StoreError
from .writer import frame, read_frame

if TYPE_CHECKING:
    from .chain import Chain
    from .events import Event

BACKLOG = 256
"""Requests a writer may have unanswered before a sender reads its answers first (its
answers' pipe then never fills while it waits for the next request)."""

UNSENT = -1
"""The ticket of a request not sent: its writer is gone."""

HINT = "check the shard writers' storage (shards/ beside the store) and their errors above"


class Writer:
    """One writer process and the shards it appends (its ``k``-th chain is ``names[k]``)."""

    def __init__(self, paths: Sequence[str], names: Sequence[str], redact: Sequence[str]) -> None:
        self.paths, self.names, self.redact = tuple(paths), tuple(names), tuple(redact)
        environ = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stockade.record.writer",
                json.dumps([list(paths), list(redact)]),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=environ,
            start_new_session=True,  # a person's ^C stops the driver, which ends its writers
        )
        self.pid = self.process.pid
        self.sent = self.received = 0
        self._answers: dict[int, tuple[Any, ...]] = {}
        self._sending = threading.Lock()
        self._receiving = threading.Lock()
        self._lost: str | None = None

    @property
    def lost(self) -> bool:
        """The writer is known to be gone (it failed to start, died, or closed its pipe)."""
        return self._lost is not None

    def started(self) -> None:
        """Wait for the writer's first answer: every chain it owns is open.

        Raises:
            StoreError: one could not be opened, or the writer did not start.
        """
        with self._receiving:
            answer = self._read()
        if answer[0] != "ok":
            self._lost = f"shard {'/'.join(self.names)}: {answer[1]}"
            raise StoreError(self._lost, hint=answer[2] or HINT)

    def send(self, request: tuple[str, int, Any]) -> int:
        """Send one request; its ticket for :meth:`wait` (:data:`UNSENT` when the writer is
        gone: then :meth:`wait` says so)."""
        data = frame(request)
        with self._sending:
            if self._lost is not None:
                return UNSENT
            if self.sent - self.received >= BACKLOG:
                try:
                    self._wait_for(self.sent - BACKLOG // 2, keep=True)
                except StoreError:
                    return UNSENT
            stream = self.process.stdin
            assert stream is not None  # noqa: S101 - made with a pipe
            try:
                stream.write(data)
                stream.flush()
            except (BrokenPipeError, ValueError):
                self._gone()
                return UNSENT
            self.sent += 1
            return self.sent

    def wait(self, ticket: int) -> Any:  # noqa: ANN401 - the request's answer
        """The answer to request ``ticket``.

        Raises:
            StoreError: the writer failed it, or is gone.
        """
        if ticket == UNSENT:
            raise StoreError(self._gone(), hint=HINT)
        answer = self._wait_for(ticket)
        if answer[0] == "ok":
            return answer[1]
        raise StoreError(f"shard {'/'.join(self.names)}: {answer[1]}", hint=answer[2] or HINT)

    def _wait_for(self, ticket: int, *, keep: bool = False) -> tuple[Any, ...]:
        with self._receiving:
            while self.received < ticket:
                answer = self._read()
                self.received += 1
                self._answers[self.received] = answer
            return self._answers[ticket] if keep else self._answers.pop(ticket)

    def _read(self) -> tuple[Any, ...]:
        stream = self.process.stdout
        assert stream is not None  # noqa: S101 - made with a pipe
        body = read_frame(stream) if self._lost is None else None
        if body is None:
            raise StoreError(self._gone(), hint=HINT)
        answer: tuple[Any, ...] = pickle.loads(body)  # noqa: S301 - this process's own child
        return answer

    def _gone(self) -> str:
        if self._lost is None:
            try:
                status = self.process.wait(5)
            except subprocess.TimeoutExpired:
                status = None
            self._lost = (
                f"the writer of shard {'/'.join(self.names)} (process {self.pid}) ended"
                f"{'' if status is None else f' with status {status}'}: the batches it had"
                " not answered were not stored"
            )
        return self._lost

    def close(self) -> None:
        """End the writer: it finishes what it was sent, closes its chains and exits."""
        with self._sending, contextlib.suppress(BrokenPipeError):
            if self.process.stdin is not None and not self.process.stdin.closed:
                self.process.stdin.close()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


class ShardedRecord:
    """``count`` shard chains for the record whose main chain is ``main``, anchored in it.

    Args:
        main: the driver's chain (its store names where the shards live).
        count: how many shards (``s0`` ... ``s{count-1}``).
        redact: the patterns the shards redact (the main store's ``store.redact``).
        processes: at most this many writer processes (default: the CPUs this process may
            run on), never more than ``count``.

    Raises:
        StoreError: a shard's store could not be opened (no writer is left running).
    """

    def __init__(
        self,
        main: Chain,
        count: int,
        redact: Sequence[str] = (),
        processes: int | None = None,
    ) -> None:
        self.main = main
        self.names = [f"s{i}" for i in range(count)]
        width = max(1, min(count, processes or len(os.sched_getaffinity(0))))
        self.writers: list[Writer] = []
        self._replacing = threading.Lock()
        try:
            for p in range(width):
                names = self.names[p::width]  # shard i: writer i % width, its chain i // width
                paths = [shard_path(main.store, name) for name in names]
                self.writers.append(Writer(paths, names, redact))
            for writer in self.writers:  # started together, waited for together
                writer.started()
            # A shard's commands cut off by a killed driver (its writer went with it) are
            # closed before anything new is appended; then every shard is anchored at once,
            # an empty one at event 0: from here on the main chain names it, and a shard
            # deleted before its next anchor (a pool killed within its first second) is
            # missed.
            self.wait([self._request("opened", i) for i in range(count)])
            self.anchor(every=True)
        except BaseException:
            self.close()
            raise

    def shard_of(self, run_id: str) -> int:
        """The shard a run's events go to (always the same one)."""
        return int(hashlib.sha256(run_id.encode()).hexdigest()[:8], 16) % len(self.names)

    def pids(self) -> list[int]:
        """The writer processes' ids."""
        return [writer.pid for writer in self.writers]

    def _request(self, op: str, shard: int, payload: object = None) -> tuple[Writer, int]:
        width = len(self.writers)
        writer = self.writers[shard % width]
        if writer.lost:
            writer = self._replace(shard % width)
        return writer, writer.send((op, shard // width, payload))

    def _replace(self, place: int) -> Writer:
        """A new writer in place of the lost one at ``place`` (the batches the lost one had
        not answered stay failed); the lost one when no new one starts. The commands the
        lost one recorded as started are not closed: this driver records their ends."""
        with self._replacing:
            lost = self.writers[place]
            if not lost.lost:
                return lost  # another thread replaced it
            fresh = Writer(lost.paths, lost.names, lost.redact)
            try:
                fresh.started()
            except StoreError:
                fresh.close()
                return lost
            lost.close()
            self.writers[place] = fresh
            return fresh

    def send(self, batches: dict[int, list[Event]]) -> list[tuple[Writer, int]]:
        """Send each shard its batch; the tickets of their appends (for :meth:`wait`, which
        raises for a batch a lost writer was not sent)."""
        return [self._request("append", i, events) for i, events in batches.items() if events]

    def wait(self, tickets: Sequence[tuple[Writer, int]]) -> list[Any]:
        """The answers to ``tickets``, every one waited for.

        Raises:
            StoreError: the first that failed (a writer failed its batch, or is gone).
        """
        answers: list[Any] = []
        failed: StoreError | None = None
        for writer, ticket in tickets:
            try:
                answers.append(writer.wait(ticket))
            except StoreError as error:
                failed = failed or error
        if failed is not None:
            raise failed
        return answers

    def append(self, events: Sequence[Event], run_id: str) -> None:
        """Append a run's events to its shard and wait until they are stored."""
        self.wait(self.send({self.shard_of(run_id): list(events)}))

    def anchor(self, *, every: bool = False) -> list[AnchorEvent]:
        """Each shard's head, appended to the main chain as an ``anchor`` event (``every``:
        an empty shard's too, at event 0)."""
        heads = []
        for i, (writer, ticket) in enumerate(
            [self._request("head", i) for i in range(len(self.names))]
        ):
            try:
                heads.append(writer.wait(ticket))
            except StoreError:  # its writer is gone and none started: read its store here
                heads.append(self._head(i))
        anchors = [
            AnchorEvent(f"anchor-{name}-{seq}", shard=name, seq=seq, hash=digest, public_key=key)
            for name, (seq, digest, key) in zip(self.names, heads, strict=True)
            if seq or every
        ]
        if anchors:
            self.main.append_many(anchors)
        return anchors

    def _head(self, shard: int) -> tuple[int, str, str]:
        from .chain import key_path, load_key, public_hex

        store = Store(shard_path(self.main.store, self.names[shard]))
        try:
            seq, digest, key = head_of(store)
            if not key:
                found = load_key(key_path(store), create=False)
                key = public_hex(found) if found is not None else ""
        finally:
            store.close()
        return seq, digest, key

    def close(self) -> None:
        """End every writer (each finishes what it was sent first)."""
        for writer in self.writers:
            writer.close()
