"""The built-in recorder: every event into the store's signed chain (:mod:`stockade.record.chain`).

The store is opened on the first event, not when the host starts. When an append fails,
the error goes back to the host: before a command runs, that refuses the command; after,
the result is returned with the failure. So while the store is broken no command runs, and
the first one after it works again is recorded as usual (``store.fail_closed``, the
default). With ``fail_closed = false`` a failure is printed as a warning and the command
goes on unrecorded.

Within :meth:`Recorder.batch`, the events one thread records are kept and appended together,
in one transaction, when the block ends (what a driver collecting many results at once uses:
``stockade-ray``); events of other threads are appended one by one as usual.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from .. import hookimpl
from ..config.schema import Config

if TYPE_CHECKING:
    from .chain import Chain
    from .events import Event

NAME = "builtin-recorder"


class Recorder:
    """Appends every event to the configured store's chain."""

    def __init__(self, config: Config, environ: Mapping[str, str]) -> None:
        self.config = config
        self.environ = dict(environ)
        self._chain: Chain | None = None
        self._lock = threading.Lock()
        self._local = threading.local()

    def chain(self) -> Chain:
        """The chain of the configured store, opened on first use (and after a failure).
        Opening it closes the record of every command whose process was killed before its
        result was recorded (:meth:`~stockade.record.chain.Chain.close_orphans`)."""
        if self._chain is None:
            from .chain import Chain
            from .store import StoreError, open_store

            with self._lock:
                if self._chain is None:
                    chain = Chain(open_store(self.config), self.config.store.redact)
                    with contextlib.suppress(StoreError):  # the next append says what is wrong
                        chain.close_orphans()
                    self._chain = chain
        return self._chain

    @hookimpl
    def stockade_record(self, event: Event) -> None:
        """Append ``event``; a failure is raised (fail closed) or warned about."""
        kept: list[Event] | None = getattr(self._local, "kept", None)
        if kept is not None:
            kept.append(event)
            return
        self._append((event,))

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Keep the events this thread records inside the block; append them in one
        transaction when it ends, even when it ends with an exception. Nothing recorded
        inside it is in the store before then: a caller that must not start a command
        before its events are stored leaves the block first. Blocks do not nest.

        Raises:
            StoreError: the batch could not be appended (none of it was), and
                ``store.fail_closed`` is set.
        """
        if getattr(self._local, "kept", None) is not None:
            raise RuntimeError("Recorder.batch() blocks do not nest")
        kept: list[Event] = []
        self._local.kept = kept
        try:
            yield
        finally:
            self._local.kept = None
            self._append(kept)

    def _append(self, events: Sequence[Event]) -> None:
        """Append ``events`` in one transaction; a failure is raised (fail closed) or warned
        about."""
        from .store import StoreError

        if not events:
            return
        try:
            self.chain().append_many(events)
        except StoreError as error:
            self._reset()
            if self.config.store.fail_closed:
                raise
            what = (
                f"{events[0].kind} event"
                if len(events) == 1
                else f"{len(events)} events ({', '.join(sorted({e.kind for e in events}))})"
            )
            print(f"stockade: warning: {what} not recorded: {error}", file=sys.stderr)

    def _reset(self) -> None:
        with self._lock:
            chain, self._chain = self._chain, None
        if chain is not None:
            chain.close()

    def close(self) -> None:
        """Close the store."""
        self._reset()


def make_plugin(config: Config, environ: Mapping[str, str]) -> Recorder:
    """The recorder for one host."""
    return Recorder(config, environ)
