"""The sharded record's writers: processes of the driver's own, fed batches through pipes.

A :class:`ShardedRecord` has ``count`` shard chains (:mod:`stockade.record.shards`), each
with its own store and signing key beside the main store, written in parallel by as many
writer processes as this process may run on CPUs at once (never more than the shards: four
shards on two cores are two processes of two chains each). Each writer is a child of this
process (:mod:`stockade.record.writer`), so it always runs on this machine, beside the main
store that names its shards, and it ends when this process does.

The driver sends a writer a batch as one frame on a pipe and goes on; a thread of the
driver's reads the writer's answers, in order, as they come, so neither pipe ever fills
while the other side waits on it. A writer that fails a batch answers with the error, and
the batch's waiter gets it as a :class:`~stockade.record.store.StoreError`. A writer that
dies, or answers nothing for :data:`STALL` seconds while a batch waits (stopped, hung: it
is then killed), fails every batch it had not answered: those may be stored or not, as a
process killed mid-commit leaves them (``stockade verify`` and the shard's log say which).
The next batch for its shards starts a new writer in its place, at most every
:data:`RETRY` seconds.

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
import select
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..run import spawn
from . import live
from .events import AnchorEvent
from .shards import head_of, shard_path
from .store import Store, StoreError
from .writer import frame, read_frame

if TYPE_CHECKING:
    from .chain import Chain
    from .events import Event

STALL = 120.0
"""Seconds a writer may answer nothing, or take nothing from its pipe, while a batch waits
on it; then it is taken for hung and killed."""
RETRY = 5.0
"""Seconds after a writer failed to start before another is started for its shards."""
UNSENT = -1
"""The ticket of a request not sent: its writer is gone."""
HINT = "check the shard writers' storage (shards/ beside the store) and their errors above"


def _search_path() -> str:
    """The writer's ``PYTHONPATH``: the folder this ``stockade`` package was imported from,
    then the absolute entries of this process's own ``PYTHONPATH``. Never a folder a command
    may write in that the driver's ``sys.path`` holds by chance (its script's folder, its
    working folder under ``python -m``), nor a relative entry: the writer holds the shard's
    signing key."""
    import stockade

    own = os.path.dirname(os.path.dirname(os.path.abspath(stockade.__file__)))
    given = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    return os.pathsep.join([own, *(p for p in given if os.path.isabs(p) and p != own)])


class Writer:
    """One writer process and the shards it appends (its ``k``-th chain is ``names[k]``).

    Raises:
        StoreError: the process could not be started.
    """

    def __init__(self, paths: Sequence[str], names: Sequence[str], redact: Sequence[str]) -> None:
        self.paths, self.names, self.redact = tuple(paths), tuple(names), tuple(redact)
        self.label = "/".join(self.names)
        self.sent, self._received = 0, -1  # answer 0: the chains opened
        self._answers: dict[int, tuple[Any, ...]] = {}
        self._lost: str | None = None
        self._why = ""  # what made this process take the writer for lost
        self._base = ""  # why it is lost, before what a replacement said
        self.failed_at = 0.0  # when a writer meant to replace this one failed to start
        self._sending = threading.Lock()
        self._changed = threading.Condition()
        searched = _search_path()
        argument = json.dumps([list(paths), list(redact), live.owner(), os.getpid()])
        try:  # -P: nothing imported from this working folder
            self.process = spawn.start_piped(
                [sys.executable, "-P", "-m", "stockade.record.writer", argument],
                env=dict(os.environ, PYTHONPATH=searched),
            )
        except OSError as error:
            raise StoreError(
                f"cannot start the writer of shard {self.label}: {error.strerror or error}",
                hint=HINT,
            ) from None
        self.pid = self.process.pid
        self._fd = self.process.stdin
        os.set_blocking(self._fd, False)
        self._reader = threading.Thread(target=self._read_all, daemon=True)
        self._reader.start()

    @property
    def lost(self) -> str | None:
        """Why the writer is gone (``None``: it is not known to be)."""
        return self._lost

    def started(self) -> None:
        """Wait for the writer's first answer: every chain it owns is open.

        Raises:
            StoreError: one could not be opened, or the writer did not start.
        """
        self.wait(0)

    def send(self, data: bytes) -> int:
        """Send one request (a :func:`~stockade.record.writer.frame`); its ticket for
        :meth:`wait` (:data:`UNSENT` when the writer is gone: then :meth:`wait` says so)."""
        with self._sending:
            if self._lost is not None:
                return UNSENT
            try:
                self._write(data)
            except OSError as error:
                self._kill(
                    f"it took nothing from its pipe for {STALL:.0f} s (stopped, or hung)"
                    if error.errno is None
                    else f"its input pipe failed: {error.strerror}"
                )
                return UNSENT
            except BaseException:  # (^C) a frame cut short: what follows would be misread
                self._kill("a request to it was cut short")
                raise
            self.sent += 1
            return self.sent

    def wait(self, ticket: int) -> Any:  # noqa: ANN401 - the request's answer
        """The answer to request ``ticket``.

        Raises:
            StoreError: the writer failed it, or is gone, or the ticket was waited for.
        """
        with self._changed:
            seen, deadline = self._received, time.monotonic() + STALL
            while ticket not in self._answers:
                if ticket == UNSENT or self._lost is not None:
                    raise StoreError(self._lost or "no shard writer", hint=HINT)
                if 0 <= ticket <= self._received or ticket > self.sent:
                    raise StoreError(
                        f"shard {self.label}: request {ticket} was answered already, or never sent",
                        hint="wait for each ticket send gave, once",
                    )
                if self._received != seen:
                    seen, deadline = self._received, time.monotonic() + STALL
                elif time.monotonic() > deadline:
                    break
                self._changed.wait(min(1.0, STALL))
            else:
                answer = self._answers.pop(ticket)
                if answer[0] == "ok":
                    return answer[1]
                raise StoreError(f"shard {self.label}: {answer[1]}", hint=answer[2] or HINT)
        self._kill(f"it answered nothing for {STALL:.0f} s (stopped, or hung)")
        raise StoreError(self._lost or "", hint=HINT)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        deadline = time.monotonic() + STALL
        while view:
            try:
                view = view[os.write(self._fd, view) :]
                deadline = time.monotonic() + STALL
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise OSError("stalled") from None
                select.select([], [self._fd], [], 1.0)

    def _read_all(self) -> None:
        stream = self.process.stdout
        try:
            while (body := read_frame(stream)) is not None:
                answer = pickle.loads(body)  # noqa: S301 - this process's own child
                with self._changed:
                    self._received += 1
                    self._answers[self._received] = answer
                    self._changed.notify_all()
        except Exception:  # noqa: BLE001, S110 - a malformed answer: the writer is lost
            pass
        self._kill("")

    def _kill(self, why: str) -> None:
        """Take the writer for lost (``why``; empty: it ended), and make sure it is."""
        with self._changed:
            if self._lost is not None:
                return
            self._why = self._why or why  # (its reader, seeing it end, says it too)
        self.process.kill()
        status = self.process.wait(5)
        ended = "" if status is None else f" with status {status}"
        unanswered = self.sent - max(self._received, 0)
        with self._changed:
            self._lost = self._lost or (
                f"the writer of shard {self.label} (process {self.pid}) ended{ended}"
                f"{': ' + self._why if self._why else ''}; {unanswered} batch(es) sent to it "
                "had no answer: they may be stored or not (`stockade verify` and the "
                "shard's log say)"
            )
            self._changed.notify_all()

    def note(self, why: str) -> None:
        """Say why no writer replaced this lost one (the last reason only)."""
        with self._changed:
            self._base = self._base or self._lost or "lost"
            self._lost = f"{self._base}; no new writer started: {why}"
        self.failed_at = time.monotonic()

    def end(self) -> None:
        """Ask the writer to end (it finishes what it was sent first) and close its pipe."""
        with self._sending:
            if self._lost is None:
                with contextlib.suppress(OSError):
                    self._write(frame(("end", 0, None)))
            with contextlib.suppress(OSError):
                self.process.close_input()

    def stop(self, seconds: float) -> None:
        """:meth:`end` it, and :meth:`join` it within ``seconds``."""
        self.end()
        self.join(time.monotonic() + seconds)

    def join(self, deadline: float) -> None:
        """Wait until ``deadline`` (monotonic) for the writer to end, then kill it."""
        if self.process.wait(max(0.0, deadline - time.monotonic())) is None:
            self.process.kill()
            self.process.wait(60)
        self._reader.join(5)
        with self._changed:
            self._lost = self._lost or f"the writers of shard {self.label} were closed"
            self._changed.notify_all()
        self.process.stdout.close()


def shard_of(run_id: str, count: int) -> int:
    """Which of ``count`` shards run ``run_id``'s events go to (always the same one)."""
    return int(hashlib.sha256(run_id.encode()).hexdigest()[:8], 16) % count


class ShardedRecord:
    """``count`` shard chains for the record whose main chain is ``main``, anchored in it.

    Args:
        main: the driver's chain (its store names where the shards live).
        count: how many shards (``s0`` ... ``s{count-1}``).
        redact: the patterns the shards redact (the main store's ``store.redact``).
        processes: at most this many writer processes (default: the CPUs this process may
            run on), never more than ``count``.

    Raises:
        StoreError: a writer could not start or a shard's store could not be opened (no
            writer is left running).
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
        self._closed = False
        try:
            for p in range(width):
                names = self.names[p::width]  # shard i: writer i % width, its chain i // width
                paths = [shard_path(main.store, name) for name in names]
                self.writers.append(Writer(paths, names, redact))
            for writer in self.writers:  # started together, waited for together
                writer.started()
            # A shard's commands cut off by a killed driver (its writers went with it) are
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
        return shard_of(run_id, len(self.names))

    def pids(self) -> list[int]:
        """The writer processes' ids."""
        return [writer.pid for writer in self.writers]

    def _writer(self, shard: int) -> tuple[Writer, int]:
        """The writer of ``shard`` (a new one in place of a lost one), and the shard's
        index among its chains.

        Raises:
            StoreError: the record is closed.
        """
        self._refuse_closed()
        width = len(self.writers)
        writer = self.writers[shard % width]
        if writer.lost is not None:
            writer = self._replace(shard % width)
        return writer, shard // width

    def _replace(self, place: int) -> Writer:
        """A new writer in place of the lost one at ``place`` (the batches the lost one had
        not answered stay failed); the lost one when no new one starts (tried again after
        :data:`RETRY` seconds). The commands the lost one recorded as started are not
        closed: they are this driver's, which records their ends."""
        with self._replacing:
            self._refuse_closed()  # (again: close() may have begun meanwhile)
            lost = self.writers[place]
            if lost.lost is None or time.monotonic() - lost.failed_at < RETRY:
                return lost  # another thread replaced it, or one failed to start just now
            try:
                fresh = Writer(lost.paths, lost.names, lost.redact)
            except StoreError as error:
                lost.note(error.message)
                return lost
            try:
                fresh.started()
            except StoreError as error:
                fresh.stop(5)
                lost.note(error.message)
                return lost
            lost.stop(5)
            self.writers[place] = fresh
            return fresh

    def _refuse_closed(self) -> None:
        if self._closed:
            raise StoreError("the sharded record is closed", hint="append before closing it")

    def _request(self, op: str, shard: int, payload: object = None) -> tuple[Writer, int]:
        writer, index = self._writer(shard)
        return writer, writer.send(frame((op, index, payload)))

    def send(self, batches: dict[int, list[Event]]) -> list[tuple[Writer, int]]:
        """Send each shard its batch; the tickets of their appends (for :meth:`wait`, which
        raises for a batch a lost writer was not sent).

        Raises:
            StoreError: a batch cannot be pickled (then none is sent), or the record is
                closed.
        """
        framed = []
        for i, events in batches.items():
            if events:
                writer, index = self._writer(i)
                try:
                    framed.append((writer, frame(("append", index, events))))
                except Exception as error:  # noqa: BLE001 - an event pickle cannot take
                    raise StoreError(
                        f"a batch for shard {self.names[i]} cannot be sent: {error}",
                        hint="record events made of plain values",
                    ) from None
        return [(writer, writer.send(data)) for writer, data in framed]

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
        asked = [self._request("head", i) for i in range(len(self.names))]
        heads = []
        for i, (writer, ticket) in enumerate(asked):
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
        """End every writer (each finishes what it was sent first), together."""
        with self._replacing:  # no replacement starts after this
            self._closed = True
        for writer in self.writers:
            writer.end()
        deadline = time.monotonic() + 60
        for writer in self.writers:
            writer.join(deadline)
