"""The built-in recorder: every event into the store's signed chain (:mod:`stockade.record.chain`).

The store is opened on the first event, not when the host starts. When an append fails,
the error goes back to the host: before a command runs, that refuses the command; after,
the result is returned with the failure. So while the store is broken no command runs, and
the first one after it works again is recorded as usual (``store.fail_closed``, the
default). With ``fail_closed = false`` a failure is printed as a warning and the command
goes on unrecorded.

A batch (:func:`~stockade.plugin.hookspecs.stockade_record_batch`: a command's action and
decision, its result and taints, a driver's collected results) is appended in one
transaction: all of it or none.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Mapping, Sequence
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
        self._append((event,))

    @hookimpl
    def stockade_record_batch(self, events: Sequence[Event]) -> None:
        """Append ``events`` in one transaction; a failure is raised (fail closed) or
        warned about, and none of them is in the store."""
        self._append(events)

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
