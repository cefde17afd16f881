"""The pool's own record, sharded: its runs' events appended by shard writer processes, anchored
in the driver's chain (``StockadePool(..., shards=N)``).

The pool's host records through :class:`ShardingRecorder`, which takes the built-in
recorder's place (same name, same batches, same fail-closed rule). Each event of a run
(the pool's own run, every episode's) goes to that run's shard
(:meth:`~stockade.record.writers.ShardedRecord.shard_of`: a run's events stay together and in
order), except what the driver reads back while it decides: ``taint`` events, and events
of no run (anchors), stay in the main chain. A batch is stored when every shard holding
part of it and the main chain have it; a failure of either fails the batch as one store's
would (the steps are not shipped, or the result comes back with the failure). Each shard's
head is anchored in the main chain at most every :data:`ANCHOR_SECONDS` and when the pool
shuts down, so ``stockade verify`` on the driver's store checks every shard with it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from stockade.record.recorder import Recorder

if TYPE_CHECKING:
    from stockade.host import Host
    from stockade.record.events import Event
    from stockade.record.store import Store, StoreError
    from stockade.record.writers import ShardedRecord

NAME = "stockade.builtin.recorder"
"""The name the pool's batches find the recorder by (the built-in one's)."""

ANCHOR_SECONDS = 1.0
"""At most this long between a shard's append and the anchor that covers it."""

KEPT_IN_MAIN = frozenset({"taint"})
"""Event kinds the driver reads back from its store while deciding (a run's taints)."""


class ShardingRecorder(Recorder):
    """The built-in recorder, with each run's events sent to its shard.

    Args:
        config: the pool host's configuration (its store is the main chain's).
        environ: its environment.
        count: how many shards.
    """

    def __init__(
        self,
        config: Any,  # noqa: ANN401 - a stockade.config.schema.Config
        environ: Mapping[str, str],
        count: int,
    ) -> None:
        super().__init__(config, environ)
        self.count = count
        self._record: ShardedRecord | None = None
        self._anchored = 0.0
        self._pending = False  # shard events not yet covered by an anchor
        self._anchoring = threading.Lock()
        self._failed_start: tuple[float, StoreError] | None = None  # the writers' last start
        self._actions: dict[str, str] = {}  # a command's run, by its action id, until it ends

    @classmethod
    def install(cls, host: Host, count: int) -> ShardingRecorder:
        """Put a sharding recorder in the place of ``host``'s built-in one."""
        made = cls(host.config, host.environ, count)
        old = host.pm.get_plugin(NAME)
        if old is not None:
            host.pm.unregister(old)
            old.close()
        host.pm.register(made, name=NAME)
        return made

    @property
    def record(self) -> ShardedRecord:
        """The shard writers, started on first use (anchoring into this recorder's chain);
        a start that failed is not tried again for :data:`~stockade.record.writers.RETRY`
        seconds (its error is raised again)."""
        if self._record is None:
            from stockade.record.store import StoreError
            from stockade.record.writers import RETRY, ShardedRecord

            with self._anchoring:
                failed = self._failed_start
                if failed is not None and time.monotonic() - failed[0] < RETRY:
                    raise StoreError(failed[1].message, hint=failed[1].hint)  # not again yet
                if self._record is None:
                    try:
                        self._record = ShardedRecord(
                            self.chain(), self.count, self.config.store.redact
                        )
                    except StoreError as error:
                        self._failed_start = (time.monotonic(), error)
                        raise
        return self._record

    def _run_of(self, event: Event) -> str:
        """The run an event belongs to: its own ``run_id``, or its command's (an action
        recorded here names it; one recorded elsewhere leaves it to the main chain)."""
        run_id: str = getattr(event, "run_id", "")
        action_id: str = getattr(event, "action_id", "")
        if event.kind == "action":
            self._actions[action_id] = run_id
        elif not run_id and action_id:
            run_id = self._actions.get(action_id, "")
            if event.kind in ("result", "error", "decline"):  # its last event
                self._actions.pop(action_id, None)
        return run_id

    def store_of(self, run_id: str) -> Store:
        """The store of the shard holding run ``run_id``'s events (the caller closes it)."""
        from stockade.record.shards import shard_path
        from stockade.record.store import Store
        from stockade.record.writers import shard_of

        name = f"s{shard_of(run_id, self.count)}"
        return Store(shard_path(self.chain().store, name))

    def _append(self, events: Sequence[Event]) -> None:
        """Each event to its run's shard (in parallel), the rest to the main chain; then
        the shards' heads anchored when the last anchor is old (an anchor that fails is a
        warning, tried again with the next batch: the batch itself is stored)."""
        from stockade.record.store import StoreError
        from stockade.record.writers import shard_of

        main: list[Event] = []
        batches: dict[int, list[Event]] = {}
        for event in events:
            run_id = self._run_of(event)
            if not run_id or event.kind in KEPT_IN_MAIN:
                main.append(event)
            else:
                batches.setdefault(shard_of(run_id, self.count), []).append(event)
        refs: list[Any] = []
        failed: StoreError | None = None
        if batches:
            try:  # (the writers start with the first batch: that can fail too)
                refs = self.record.send(batches)
            except StoreError as error:
                failed = error
        try:
            super()._append(main)
        finally:
            try:
                if refs:
                    self.record.wait(refs)
            except StoreError as error:  # a writer failed the batch or is gone
                failed = failed or error
            if failed is not None:
                self._failed(failed)
        if refs:
            self._pending = True
            if time.monotonic() - self._anchored > ANCHOR_SECONDS:
                self._anchor_now()

    def _failed(self, failed: StoreError) -> None:
        """A batch a shard did not store: raised when the store fails closed, else said."""
        from stockade.record.store import StoreError

        said = StoreError(
            f"a shard of the record did not store its events: {failed.message}", hint=failed.hint
        )
        if self.config.store.fail_closed:
            raise said from None
        print(f"stockade: warning: {said.message}", file=sys.stderr)

    def _anchor_now(self) -> None:
        """Anchor the shards after a batch: one that fails is said, and tried again."""
        from stockade.record.store import StoreError

        try:
            self.anchor()
        except StoreError as error:
            print(
                f"stockade: warning: the shards' heads were not anchored ({error.message}); "
                "tried again with the next batch",
                file=sys.stderr,
            )

    def anchor(self) -> None:
        """Anchor every shard's head in the main chain now.

        Raises:
            StoreError: the anchor was not stored (then it is tried again next time).
        """
        with self._anchoring:
            if self._record is None or not self._pending:
                return
            self._pending = False
            self._anchored = time.monotonic()
            self._record.main = self.chain()  # (a failed append closes the chain it had)
            try:
                self._record.anchor()
            except BaseException:
                self._pending = True
                raise

    def close(self) -> None:
        """Anchor what is not yet anchored, stop the writers, close the main chain."""
        try:
            if self._record is not None:
                try:
                    self.anchor()
                finally:
                    self._record.close()
                    self._record = None
        finally:
            super().close()


__all__ = ["ANCHOR_SECONDS", "KEPT_IN_MAIN", "ShardingRecorder"]
