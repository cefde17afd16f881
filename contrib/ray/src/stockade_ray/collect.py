"""The collector: one thread that records what comes back and settles every future, whatever
fails around it.

Every reply that is ready at once is recorded in one transaction. A reply that cannot be
read, a worker that died, a node that was lost: each settles its own steps (a lost one as
:class:`~stockade_ray.errors.WorkerLost`, saying from the ledger whether it had started) and
the thread goes on; a failure of the thread's own code is reported and the loop resumes, so
no step is ever left placed with no outcome. Held steps wait here too: approved, they are
claimed and shipped to the pool; declined, or run by another process, their future settles.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import attrs

from stockade.errors import PolicyHeld, RecorderFailed, StockadeError, UsageError
from stockade.policy import held as held_steps
from stockade.request.step import Carried
from stockade.request.wire import from_json, step_from_json, to_json

from .errors import RemoteFailure, StepCancelled, WorkerLost, rebuilt

if TYPE_CHECKING:
    from stockade.host import Host
    from stockade.request.result import RunResult
    from stockade.run.doer import Admission

    from .episode import Episode
    from .pool import StockadePool
    from .workers import Slot

FORGET_BATCH = 64
"""Finished steps told to the ledger in one call, at most."""
FORGET_SECONDS = 1.0
"""At most this long between a step's end and the ledger's call that forgets it."""


@attrs.frozen
class Done:
    """A step a worker carried out, as recorded.

    Attributes:
        result: its result (the same value the record holds).
        files: the files it created or changed, as the file tool read them (text up to
            the per-file cap; binary files described), when its workspace was watched.
        left_out: changed files past the total cap, only named.
        node: the node that ran it.
        actor: the worker (actor id) that ran it.
    """

    result: RunResult
    files: tuple[dict[str, Any], ...] = ()
    left_out: tuple[str, ...] = ()
    node: str = ""
    actor: str = ""


class StepFuture(Future[Done]):
    """The future of one step: :meth:`result` gives its :class:`Done` once it is recorded,
    or raises the step's :class:`~stockade.errors.StockadeError`.

    Attributes:
        index: its position in the requests given to ``map``.
        ref: the Ray reference of the worker's reply (``None`` until it is shipped, and for
            a step refused before it was): ``ray.cancel(future.ref)`` kills its command.
        action_id: its command's id in the record.
        worker: where it was shipped (``node``, ``actor``, ``hostname``, ``pid``).
        held: ``{"run_id", "step"}`` while it waits for a person (it runs on the pool once
            approved), else ``None``.
    """

    def __init__(self, index: int = 0) -> None:
        super().__init__()
        self.index = index
        self.ref: Any = None
        self.action_id = ""
        self.worker: dict[str, str] = {}
        self.held: dict[str, Any] | None = None


@attrs.define(eq=False)
class Shipped:
    """A step on its way: what the collector needs to record and settle it."""

    future: StepFuture
    admission: Admission
    run: Host
    slot: Slot
    actor: Any
    files: dict[str, bytes]
    episode: Episode | None = None
    held: tuple[str, int] | None = None


@attrs.define(eq=False)
class Held:
    """A step waiting for a person, with what it needs to be shipped once approved."""

    future: StepFuture
    run: Host
    files: dict[str, bytes]
    episode: Episode | None = None


class Collector:
    """The thread that records replies and watches held steps, for one pool."""

    def __init__(self, pool: StockadePool) -> None:
        self.pool = pool
        self.runs: dict[str, Host] = {pool.host.run_id: pool.host}
        self._lock = threading.Condition()
        self._shipped: dict[Any, Shipped] = {}
        self._held: dict[tuple[str, int], Held] = {}
        self._stop = False
        self._checked = 0.0
        self._finished: list[str] = []  # finished steps the ledger is not yet told of
        self._forgot = 0.0
        self._thread = threading.Thread(target=self._loop, name="stockade-ray-collect", daemon=True)
        self._thread.start()

    def run_of(self, run_id: str) -> Host:
        """The run (the pool's, or an episode's) ``run_id`` names.

        Raises:
            UsageError: no run of this pool has that id.
        """
        found = self.runs.get(run_id)
        if found is None:
            raise UsageError(f"run {run_id} is not one of this pool's", details={"run_id": run_id})
        return found

    def watch(self, shipped: Shipped) -> None:
        with self._lock:
            self._shipped[shipped.future.ref] = shipped
            self._lock.notify_all()

    def hold(self, waiting: Held, error: PolicyHeld) -> None:
        key = (str(error.details["run_id"]), int(error.details["step"]))  # type: ignore[call-overload]
        waiting.future.held = {"run_id": key[0], "step": key[1], "hint": error.hint}
        with self._lock:
            self._held[key] = waiting
            self._lock.notify_all()

    def wake(self) -> None:
        with self._lock:
            self._checked = 0.0
            self._lock.notify_all()

    # --- the loop ------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            try:
                if not self._once():
                    return
            except Exception as bug:  # noqa: BLE001 - the collector must outlive any failure
                print(f"stockade-ray: the collector met {bug!r}; it goes on", file=sys.stderr)
                time.sleep(0.2)

    def _once(self) -> bool:
        import ray

        with self._lock:
            while not self._shipped and not self._held and not self._stop:
                self._lock.wait()
            if self._stop and not self._shipped:
                return False
            refs, checking = list(self._shipped), bool(self._held)
        if refs:
            try:
                ready, _ = ray.wait(refs, num_returns=1, timeout=0.2)
                if ready:
                    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            except Exception:  # noqa: BLE001 - Ray itself went away: every step is lost
                ready = refs
            if ready:
                self.finish(ready)
        else:
            with self._lock:
                self._lock.wait(0.3)
        if checking and time.monotonic() - self._checked > 0.3:
            self._checked = time.monotonic()
            self._check_held()
        return True

    # --- replies -------------------------------------------------------------------------

    def finish(self, ready: list[Any]) -> None:
        """Record the replies ``ready`` (one transaction) and settle their futures."""
        with self._lock:
            shipped = [self._shipped.pop(ref) for ref in ready if ref in self._shipped]
        replies = [_reply(item) for item in shipped]
        lost = [item for item, (kind, _) in zip(shipped, replies, strict=True) if kind == "lost"]
        begun = self._begun([item.admission.spec.action_id for item in lost])
        settled: list[tuple[Shipped, Done | StockadeError]] = []
        with self.pool.batch() as failed:
            for item, (kind, value) in zip(shipped, replies, strict=True):
                try:
                    outcome = self._outcome(item, kind, value, begun)
                except Exception as bad:  # noqa: BLE001 - a malformed reply fails its step only
                    outcome = RemoteFailure(
                        f"the worker's reply could not be read: {bad!r}",
                        hint="run the same Stockade version on the driver and the workers",
                    )
                    with contextlib.suppress(StockadeError):
                        self.pool.host.recording.error(item.admission.spec, outcome)
                settled.append((item, outcome))
        for item in lost:
            self.pool.places.lose(item.slot, item.actor)
        self._forget([i.admission.spec.action_id for i in shipped if i not in lost])
        for item in shipped:
            item.slot.busy -= 1
        for item, outcome in settled:
            settle(item, outcome, failed[0] if failed else None)

    def _forget(self, finished: list[str]) -> None:
        """Tell the ledger of finished steps, a batch at a time (at most every
        :data:`FORGET_SECONDS`, or :data:`FORGET_BATCH` of them): a call a step cost the
        driver and the ledger about a millisecond each. A finished step the ledger still
        holds is harmless: it is only ever asked about lost ones."""
        self._finished += finished
        now = time.monotonic()
        if self._finished and (
            len(self._finished) >= FORGET_BATCH or now - self._forgot > FORGET_SECONDS
        ):
            told, self._finished, self._forgot = self._finished, [], now
            with contextlib.suppress(Exception):
                self.pool.ledger.forget.remote(told)

    def _begun(self, action_ids: list[str]) -> set[str]:
        """Which lost steps a worker had begun (all of them when the ledger cannot say)."""
        if not action_ids:
            return set()
        import ray

        try:
            return set(ray.get(self.pool.ledger.took.remote(action_ids), timeout=10))
        except Exception:  # noqa: BLE001 - unknown: say it may have started
            return set(action_ids)

    def _outcome(
        self,
        item: Shipped,
        kind: str,
        value: Any,  # noqa: ANN401 - a reply, or what Ray raised
        begun: set[str],
    ) -> Done | StockadeError:
        """What one reply came to, recorded (in the collector's batch)."""
        spec, recording = item.admission.spec, self.pool.host.recording
        if kind == "ok":
            for seen in value["connections"]:
                recording.connection(spec.action_id, _Connection(**seen))
            if "error" not in value:
                carried = step_from_json(value["carried"], Carried)
                result = item.run.breaker.finish(spec, carried, recording.result)  # + taints
                place = value["where"]
                return Done(
                    result,
                    tuple(value["files"]),
                    tuple(value["left_out"]),
                    node=place["node"],
                    actor=place["actor"],
                )
            error: StockadeError = rebuilt(value["error"])
        elif kind == "cancelled":
            error = StepCancelled(
                "the step was cancelled, so its command and everything it started were killed"
            )
        elif kind == "lost":
            error = lost_error(item, value, started=spec.action_id in begun)
        else:
            error = RemoteFailure(
                f"the worker failed: {value}", hint="see the worker's log (a Stockade bug)"
            )
        recording.error(spec, error)
        return error

    # --- held steps ----------------------------------------------------------------------

    def _check_held(self) -> None:
        with self._lock:
            waiting = list(self._held.items())
        for key, item in waiting:
            try:
                found = item.run.store.get(*key)
                if found.state in ("held", "running"):  # running: another process runs it
                    continue
                with self._lock:
                    self._held.pop(key, None)
                if found.state == "approved":
                    self._release(key, item)
                    continue
                result = held_steps.settled(found)  # declined: raised
                if result is not None:
                    item.future.set_result(Done(result))
                else:  # it failed where it ran
                    outcome = from_json(found.outcome or "{}", dict[str, Any])
                    item.future.set_exception(rebuilt(outcome))
            except StockadeError as error:
                with self._lock:
                    self._held.pop(key, None)
                _set(item.future, error)

    def _release(self, key: tuple[str, int], item: Held) -> None:
        """An approved held step: claimed, decided again, placed and shipped to the pool."""
        with self.pool.batch() as failed:
            admission = item.run.readmit(*key)
            own = admission.step.agent.own_workspace
            try:
                shipped = self.pool.place(
                    item.future,
                    admission,
                    item.run,
                    item.files,
                    episode=item.episode,
                    held=key,
                    sticky=own,
                )
            except StockadeError as error:  # claimed, yet nowhere to run: kept and recorded
                item.run.store.finish(*key, outcome=to_json(error.to_dict()), failed=True)
                self.pool.host.recording.error(admission.spec, error)
                raise
        if failed:
            item.run.store.finish(
                *key, outcome=to_json(cast_error(failed[0]).to_dict()), failed=True
            )
            raise cast_error(failed[0])
        item.future.action_id = admission.spec.action_id
        item.future.held = None
        self.pool.send(shipped)

    # --- the end -------------------------------------------------------------------------

    def stop(self, timeout: float) -> None:
        """Cancel what runs, release every waiter, and end the thread: a step whose reply
        does not come within ``timeout`` is recorded as lost, a held one stays held."""
        import ray

        with self._lock:
            self._stop = True
            refs = list(self._shipped)
            waiting = list(self._held.items())
            self._held.clear()
            self._lock.notify_all()
        for ref in refs:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        for (run_id, step), item in waiting:
            _set(
                item.future,
                PolicyHeld(
                    f"the pool shut down while step {step} of run {run_id} waited for a person",
                    hint=f"it stays held: `stockade approve {run_id} {step}` runs it there",
                    details={"run_id": run_id, "step": step},
                ),
            )
        self._thread.join(timeout)
        with self._lock:
            left = list(self._shipped.values())
            self._shipped.clear()
        with self.pool.batch():
            for gone in left:
                error = WorkerLost(
                    "the pool shut down before the worker gave this step's result back",
                    details={"started": True, **_named(gone)},
                )
                with contextlib.suppress(StockadeError):
                    self.pool.host.recording.error(gone.admission.spec, error)
                settle(gone, error, None)


def _reply(item: Shipped) -> tuple[str, Any]:
    """A ready reply: ``ok`` and the reply, or ``cancelled``, ``lost`` or ``failed``."""
    import ray
    from ray import exceptions as rex

    try:
        return "ok", ray.get(item.future.ref, timeout=30)
    except rex.TaskCancelledError:
        return "cancelled", None
    except (rex.RayActorError, rex.WorkerCrashedError, rex.NodeDiedError) as lost:
        return "lost", lost
    except (rex.ObjectLostError, rex.GetTimeoutError) as lost:
        return "lost", lost
    except Exception as failure:  # noqa: BLE001 - the worker raised what it should not
        return "failed", failure


def lost_error(item: Shipped, cause: object, *, started: bool) -> WorkerLost:
    """The loss of a step whose worker died, saying whether it had started."""
    how = (
        "it had started, so its command may have run in part"
        if started
        else "it had not started: nothing of it ran, so it is safe to run again"
    )
    details: dict[str, Any] = {"started": started, **_named(item)}
    hint = "the pool starts another worker; run the step again if it is safe to"
    if item.episode is not None:  # what becomes of its workspace: Episode.rehome
        details["episode"] = item.episode.name
        hint += (
            "; the episode goes on on the replacement, in its workspace as its last finished "
            "step left it where that survives, else forked again from its snapshot (its "
            "changes since are lost) or empty: Episode.rehomed and the record say which"
        )
    return WorkerLost(
        f"the worker running this step was lost before it gave a result back ({how}): {cause}",
        hint=hint,
        details=details,
    )


def _named(item: Shipped) -> dict[str, str]:
    where = item.future.worker
    return {"node": where.get("node", ""), "actor": where.get("actor", "")}


def settle(item: Shipped, outcome: Done | StockadeError, failed: BaseException | None) -> None:
    """Settle a step's future (once), and keep a released held step's outcome in the store."""
    if isinstance(outcome, Done) and failed is not None:
        outcome = RecorderFailed(
            f"the command ran, but its result was not recorded: {failed}",
            hint="the result is attached to this error; check the recorder's storage",
            result=outcome.result,
        )
    if item.held is not None:
        kept = outcome.result if isinstance(outcome, Done) else outcome.to_dict()
        with contextlib.suppress(StockadeError):
            item.run.store.finish(
                *item.held, outcome=to_json(kept), failed=not isinstance(outcome, Done)
            )
    if isinstance(outcome, Done):
        with contextlib.suppress(Exception):
            item.future.set_result(outcome)
    else:
        _set(item.future, outcome)


def _set(future: StepFuture, error: BaseException) -> None:
    with contextlib.suppress(Exception):  # already settled (a shutdown raced it)
        future.set_exception(error)


def cast_error(error: BaseException) -> StockadeError:
    if isinstance(error, StockadeError):
        return error
    return RemoteFailure(str(error))


@attrs.frozen
class _Connection:
    """A connection the worker's egress proxy reported, as the recorder takes it."""

    host: str
    port: int
    allowed: bool
    reason: str
    method: str
    bytes_up: int
    bytes_down: int


__all__ = ["Collector", "Done", "Held", "Shipped", "StepFuture"]
