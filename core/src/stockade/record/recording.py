"""What the host writes down along one command's path, through the recorder hooks.

Events are built only when a recorder is loaded: without one, nothing is built or imported.
A recorder that fails before a command runs stops it (:class:`~stockade.errors.RecorderFailed`:
a command is never run unrecorded); one that fails after it ran keeps the result on the error.

Events that belong together are recorded in a :meth:`Recording.batch`: kept until the block
ends, then handed to the recorders at once (the
:func:`~stockade.plugin.hookspecs.stockade_record_batch` hook: one transaction in the
built-in recorder). The host keeps a command's action and decision in one, stored before the
command starts, and its result and taints in another.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ..errors import RecorderFailed, StockadeError

if TYPE_CHECKING:
    from ..plugin.manager import Hooks
    from ..request.literals import TaintKind
    from ..request.result import RunResult
    from ..request.spec import ExecSpec
    from ..request.step import Carried
    from ..request.verdict import Classification, Decision
    from . import events


class Recording:
    """The record of one host's commands.

    Attributes:
        active: whether any recorder is loaded (when not, every method does nothing).
    """

    def __init__(self, hooks: Hooks) -> None:
        self.hooks = hooks
        self.active = hooks.has_recorder()
        self._local = threading.local()  # kept: this thread's batch; failed: its failure

    def record(self, event: events.Event) -> None:
        """Hand ``event`` to every recorder (inside a :meth:`batch`: when it ends).

        Raises:
            RecorderFailed: a recorder failed (so the command must not run).
        """
        kept: list[events.Event] | None = getattr(self._local, "kept", None)
        if kept is not None:
            kept.append(event)
            return
        self._hand((event,))

    def _hand(self, batch: Sequence[events.Event], ran: RunResult | None = None) -> None:
        """Hand ``batch`` to every recorder; a failure is :class:`RecorderFailed` (with
        ``ran``: the result of the command that ran, on the error)."""
        try:
            self.hooks.record_batch(batch)
        except Exception as error:
            if ran is not None:
                raise RecorderFailed(
                    f"the command ran, but a recorder failed to record its result: {error}",
                    hint="the result is attached to this error; check the recorder's storage",
                    result=ran,
                ) from error
            raise RecorderFailed(
                f"a recorder failed, so the command was not run: {error}",
                hint="check the recorder's storage, or block the recorder plugin",
            ) from error

    @contextlib.contextmanager
    def batch(self, *, ran: RunResult | None = None) -> Iterator[None]:
        """Keep what this thread records inside the block; hand it to the recorders at once
        when the block ends, even with an exception (a refused command's events are kept).
        Nothing recorded inside it is stored before then (or before a :meth:`flush`): a
        command starts only after the block that recorded its decision ended. A block
        inside another joins it: its events are handed on when the outermost one ends.
        ``ran``: the result of the command whose record this is, put on the error.

        Raises:
            RecorderFailed: a recorder refused the batch, or a :meth:`flush` inside it
                failed (then what was kept after the flush is still handed on first).
        """
        if not self.active or getattr(self._local, "kept", None) is not None:
            yield
            return
        kept: list[events.Event] = []
        self._local.kept, self._local.failed = kept, None
        try:
            yield
        finally:
            failed: RecorderFailed | None = self._local.failed
            self._local.kept = self._local.failed = None
            if kept:
                self._hand(kept, ran)
            if failed is not None:
                raise failed

    def flush(self) -> None:
        """Hand on what the current :meth:`batch` kept so far, and go on keeping: before a
        person is asked (who may take minutes) and before a step is held, so that what
        was recorded of it is stored first.

        Raises:
            RecorderFailed: a recorder failed; the batch's end raises it again.
        """
        kept: list[events.Event] | None = getattr(self._local, "kept", None)
        if not kept:
            return
        batch = list(kept)
        kept.clear()
        try:
            self._hand(batch)
        except RecorderFailed as error:
            self._local.failed = error
            raise

    def action(self, spec: ExecSpec) -> None:
        """The command as it was asked for, resolved (its ``action`` event)."""
        if self.active:
            from . import events

            self.record(events.ActionEvent.of(spec))

    def permission(
        self, spec: ExecSpec, classification: Classification, decision: Decision
    ) -> None:
        """A decision (a gate's, the policy's, a person's), and the one-shot grant it gives."""
        if not self.active:
            return
        from . import events

        self.record(events.PermissionEvent(spec.action_id, classification, decision=decision))
        if spec.grant_writable and decision.verdict == "allow":
            self.record(
                events.GrantEvent(spec.action_id, writable=spec.grant_writable, by=decision.by)
            )

    def gate(self, spec: ExecSpec, classification: Classification, decision: Decision) -> None:
        """A caller's gate in front of the policy (never a grant)."""
        if self.active:
            from . import events

            self.record(events.PermissionEvent(spec.action_id, classification, decision=decision))

    def error(
        self,
        spec: ExecSpec,
        error: StockadeError | None = None,
        *,
        code: str = "",
        message: str = "",
    ) -> None:
        """Why an admitted command did not run, or did not finish: closes its record."""
        if not self.active:
            return
        from . import events

        if error is not None:
            code, message = error.code, error.message
        self.record(events.ErrorEvent(spec.action_id, code, message=message))

    def decline(self, action_id: str, *, by: str, reason: str) -> None:
        """A person's refusal of a held step (final at once)."""
        if self.active:
            from . import events

            self.record(events.DeclineEvent(action_id, by=by, reason=reason))

    def placement(
        self,
        action_id: str,
        *,
        node: str,
        actor: str,
        hostname: str = "",
        inputs: dict[str, str] | None = None,
    ) -> None:
        """Where a step is carried out: the node and worker it is shipped to (before it is),
        and the sha256 of each input file handed to it.

        Raises:
            RecorderFailed: a recorder failed (so the step must not be shipped).
        """
        if self.active:
            from . import events

            self.record(
                events.PlacementEvent(
                    action_id, node=node, actor=actor, hostname=hostname, inputs=inputs or {}
                )
            )

    def annotation(self, event: events.AnnotationEvent) -> None:
        """A verdict on a run (a reward, a grader's score).

        Raises:
            RecorderFailed: a recorder failed.
        """
        if self.active:
            self.record(event)

    def taint(
        self, action_id: str, *, taint: TaintKind, source: str, detail: str, run_id: str, step: int
    ) -> None:
        """A run came to hold private data or somebody else's words (the breaker's facts).

        Raises:
            RecorderFailed: a recorder failed.
        """
        if self.active:
            from . import events

            self.record(
                events.TaintEvent(
                    action_id,
                    taint=taint,
                    source=source,
                    detail=detail,
                    run_id=run_id,
                    step=step,
                )
            )

    def connection(self, action_id: str, connection: Any) -> None:  # noqa: ANN401 - egress.Connection
        """One connection the egress proxy allowed or refused. Called from the proxy's
        thread, so a failing recorder is a warning, never an exception."""
        if not self.active:
            return
        from . import events

        try:
            self.hooks.record(events.ConnectionEvent(action_id, **attrs.asdict(connection)))
        except Exception as error:  # noqa: BLE001 - the proxy's thread must go on
            print(f"stockade: warning: connection not recorded: {error}", file=sys.stderr)

    def result(self, carried: Carried) -> RunResult:
        """What the check after the run did, then the result; gives the result back.

        Raises:
            RecorderFailed: the command ran, but its result was not recorded (the result is
                on the error).
        """
        result = carried.result
        if not self.active:
            return result
        from . import events

        found: list[events.Event] = []
        guarded = carried.guarded
        if guarded is not None and (guarded.quarantined or guarded.restored or guarded.failed):
            found.append(events.QuarantineEvent.of(result.action_id, guarded))
        if guarded is not None and guarded.conflicts:
            found.append(
                events.ConflictEvent(
                    result.action_id,
                    paths=guarded.conflicts,
                    rivals=guarded.rivals,
                    folder=guarded.folder,
                )
            )
        found.append(events.ResultEvent(result.action_id, result))
        kept: list[events.Event] | None = getattr(self._local, "kept", None)
        if kept is not None:
            kept.extend(found)
        else:
            self._hand(found, result)
        return result
