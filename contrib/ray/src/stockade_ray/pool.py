"""The pool: warm hosts as Ray actors, driven from one process that decides and records.

    driver (this process)                          workers (Ray actors, any node)
    ExecRequest -> Host.admit (deciding; held steps stay here)
                -> placement event -> AdmittedStep (wire text) ──►  Doer: confine, execute,
                                                                    observe (the node's
    one signed chain  ◄── connection, quarantine, result / error ◄── sandbox) -> reply

The driver's :class:`~stockade.host.Host` decides every step exactly as a local run does
(classify, enforce, policy, hold); a step that would ask is held in the driver's store and
is answered as any held step is (``stockade approve``). Workers have no terminal and never
record. What comes back is appended to the driver's chain by one collecting thread, all the
steps that finished together in one transaction (:meth:`Recorder.batch
<stockade.record.recorder.Recorder.batch>`).

Steps that name a workspace (an agent profile's own, or ``ExecRequest.workspace``) stick to
one worker, so a rollout's files persist across its steps and one process holds its lock.
A worker that dies mid-step gives that step a :class:`~stockade_ray.errors.WorkerLost`
(recorded as an ``error`` event) and is replaced.

Ray does the cluster, the scheduling, the transport and the cancellation; this module only
places steps on actors and records what comes back.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, as_completed
from typing import TYPE_CHECKING, Any, cast

import attrs

from stockade.config.schema import Config
from stockade.errors import RecorderFailed, StockadeError, UsageError
from stockade.host import Host
from stockade.request.spec import ExecRequest
from stockade.request.step import Carried
from stockade.request.wire import step_from_json, step_to_json

from .errors import RemoteFailure, StepCancelled, WorkerLost, rebuilt
from .worker import Caps, Worker

if TYPE_CHECKING:
    from stockade.request.result import RunResult
    from stockade.run.doer import Admission

INPUT_BYTES = 1024 * 1024
"""The most a request's input files may hold in all."""

DEFAULT_PLACEMENT: Mapping[str, Any] = {"num_cpus": 0, "scheduling_strategy": "SPREAD"}
"""Ray actor options when none are given: a worker mostly waits on its command, so it
claims no CPU, and workers are spread over the nodes."""


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
    """The future of one shipped step: :meth:`result` gives its :class:`Done` once it is
    recorded, or raises the step's :class:`~stockade.errors.StockadeError`.

    Attributes:
        index: its position in the requests given to :meth:`StockadePool.map`.
        ref: the Ray reference of the worker's reply (``None`` until it is shipped, and for
            a step refused before it was): ``ray.cancel(future.ref)`` kills its command.
        action_id: its command's id in the record.
        worker: where it was shipped (``node``, ``actor``, ``hostname``, ``pid``).
    """

    def __init__(self, index: int = 0) -> None:
        super().__init__()
        self.index = index
        self.ref: Any = None
        self.action_id = ""
        self.worker: dict[str, str] = {}


@attrs.define
class _Slot:
    """One place in the pool: the actor now serving it and where that actor runs."""

    actor: Any
    where: dict[str, str]
    busy: int = 0


@attrs.define
class _Shipped:
    future: StepFuture
    admission: Admission
    slot: _Slot
    actor: Any


class StockadePool:
    """``size`` warm workers on a Ray cluster, fed by one deciding, recording driver.

    Ray must be initialized (``ray.init(...)``) before a pool is made.

    Args:
        size: how many workers.
        config: the configuration every worker and the driver use (embedded defaults when
            omitted); its store is the one chain.
        placement: Ray actor options for each worker (``num_cpus``, ``resources``,
            ``scheduling_strategy``, ...); :data:`DEFAULT_PLACEMENT` when omitted.
        environ: the ambient environment the driver filters children's from, and whose
            ``STOCKADE_DISABLE_PLUGINS`` the workers load their plugins with.
        caps: how much of the changed files comes back (:class:`~stockade_ray.worker.Caps`).
        plugins: extra plugin objects for the driver's host (policies, classifiers,
            recorders: everything that decides or records runs here, never on a worker).
    """

    def __init__(
        self,
        size: int = 4,
        config: Config | None = None,
        placement: Mapping[str, Any] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        caps: Caps | None = None,
        plugins: Sequence[object] = (),
    ) -> None:
        import ray

        if size < 1:
            raise UsageError(f"a pool needs at least one worker, not {size}")
        self.host = Host(_pinned(config or Config()), environ=environ, plugins=plugins)
        self.caps = caps or Caps()
        env = self.host.environ
        self._worker_env = {k: env[k] for k in ("STOCKADE_DISABLE_PLUGINS",) if k in env}
        options = dict(DEFAULT_PLACEMENT if placement is None else placement)
        self._actor_class = ray.remote(Worker).options(max_concurrency=1, **options)
        self._lock = threading.Condition()
        self._slots = self._start(size)
        self._sticky: dict[str, _Slot] = {}
        self._shipped: dict[Any, _Shipped] = {}
        self._turn = itertools.count()
        self._closed = False
        self._collector = threading.Thread(
            target=self._collect, name="stockade-ray-collect", daemon=True
        )
        self._collector.start()

    # --- workers ---------------------------------------------------------------------------

    def _start(self, count: int = 1) -> list[_Slot]:
        """``count`` new workers, started together; once each says where it runs."""
        import ray

        config, run_id = self.host.config, self.host.run_id
        actors = [self._actor_class.remote(config, run_id, self._worker_env) for _ in range(count)]
        places = ray.get([actor.where.remote() for actor in actors])
        return [_Slot(actor, dict(place)) for actor, place in zip(actors, places, strict=True)]

    def workers(self) -> list[dict[str, str]]:
        """Where each worker runs now: ``node``, ``actor``, ``hostname``, ``pid``."""
        with self._lock:
            return [dict(slot.where) for slot in self._slots]

    def _replace(self, slot: _Slot, dead: Any) -> None:  # noqa: ANN401 - a Ray actor handle
        """A new worker in ``slot`` when ``dead`` still serves it (once per death)."""
        if slot.actor is not dead:
            return
        (fresh,) = self._start()
        with self._lock:
            if slot.actor is dead:
                slot.actor, slot.where = fresh.actor, fresh.where

    # --- shipping --------------------------------------------------------------------------

    def run(self, request: ExecRequest, *, files: Mapping[str, bytes] | None = None) -> StepFuture:
        """Decide ``request`` here, then ship it to a worker; its future.

        Raises:
            StockadeError: it was refused before it was shipped (denied, held for a person,
                a bad input file, ...): as :meth:`stockade.host.Host.run` raises it.
        """
        (future,) = self._ship([(0, request, files)])
        if future.done() and future.exception() is not None:
            raise future.exception()  # type: ignore[misc]
        return future

    def map(
        self,
        requests: Iterable[ExecRequest | tuple[ExecRequest, Mapping[str, bytes]]],
        *,
        chunk: int = 64,
    ) -> Iterator[StepFuture]:
        """Ship every request (with its input files when given as a pair) and yield their
        futures as they finish (each knows its ``index``). A request refused before it was
        shipped yields a future holding its error."""
        futures: list[StepFuture] = []
        batch: list[tuple[int, ExecRequest, Mapping[str, bytes] | None]] = []
        for index, item in enumerate(requests):
            request, files = item if isinstance(item, tuple) else (item, None)
            batch.append((index, request, files))
            if len(batch) == chunk:
                futures += self._ship(batch)
                batch = []
        futures += self._ship(batch)
        for done in as_completed(futures):
            yield cast("StepFuture", done)

    def _ship(
        self, batch: list[tuple[int, ExecRequest, Mapping[str, bytes] | None]]
    ) -> list[StepFuture]:
        """Admit a batch and record its placements in one transaction; once that is
        stored, ship each admitted step to its worker."""
        if self._closed:
            raise UsageError("the pool is shut down", hint="make a new StockadePool")
        futures, ready = [], []
        with self._batch() as failed:
            for index, request, files in batch:
                future = StepFuture(index)
                futures.append(future)
                try:
                    _check_inputs(files)
                    admission = self.host.admit(request)
                    future.action_id = admission.spec.action_id
                    slot = self._place(admission, request)
                    self.host.recording.placement(
                        admission.spec.action_id,
                        node=slot.where["node"],
                        actor=slot.where["actor"],
                        hostname=slot.where["hostname"],
                    )
                except StockadeError as error:
                    future.set_exception(error)
                    continue
                ready.append((future, admission, slot, dict(files or {})))
        if failed:  # nothing of the batch is recorded, so nothing of it runs
            for future, *_ in ready:
                future.set_exception(failed[0])
            return futures
        for future, admission, slot, files in ready:
            actor, future.worker = slot.actor, dict(slot.where)
            future.ref = actor.carry.remote(
                step_to_json(admission.step), dict(admission.secrets), files, self.caps
            )
            with self._lock:
                self._shipped[future.ref] = _Shipped(future, admission, slot, actor)
                self._lock.notify_all()
        return futures

    def _place(self, admission: Admission, request: ExecRequest) -> _Slot:
        """The worker for a step: the one its workspace sticks to, else the least busy."""
        sticky = admission.step.agent.own_workspace or request.workspace is not None
        key = admission.spec.workspace if sticky else None
        with self._lock:
            slot = self._sticky.get(key) if key is not None else None
            if slot is None:
                turn = next(self._turn)
                size = len(self._slots)
                slot = min(
                    (self._slots[(turn + i) % size] for i in range(size)), key=lambda s: s.busy
                )
                if key is not None:
                    self._sticky[key] = slot
            slot.busy += 1
        return slot

    @contextlib.contextmanager
    def _batch(self) -> Iterator[list[BaseException]]:
        """The recorder's batch for this thread; ``failed`` holds its failure, if any."""
        recorder = self.host.pm.get_plugin("stockade.builtin.recorder")
        failed: list[BaseException] = []
        if recorder is None:
            yield failed
            return
        try:
            with recorder.batch():
                yield failed
        except StockadeError as error:
            failed.append(
                RecorderFailed(
                    f"a recorder failed, so the steps were not shipped: {error}",
                    hint="check the recorder's storage",
                )
            )

    # --- collecting ------------------------------------------------------------------------

    def _collect(self) -> None:
        """Wait for replies; record every reply that is ready in one batch; settle them."""
        import ray

        while True:
            with self._lock:
                while not self._shipped and not self._closed:
                    self._lock.wait()
                if not self._shipped and self._closed:
                    return
                refs = list(self._shipped)
            try:
                ready, _ = ray.wait(refs, num_returns=1, timeout=0.2)
                if ready:
                    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            except Exception:  # noqa: BLE001 - Ray itself went away: every step is lost
                ready = refs
            if ready:
                self._finish(ready)

    def _finish(self, ready: list[Any]) -> None:
        with self._lock:
            shipped = [self._shipped.pop(ref) for ref in ready]
        settled: list[tuple[StepFuture, Done | StockadeError]] = []
        lost: list[_Shipped] = []
        with self._batch() as failed:
            for item in shipped:
                try:
                    outcome = self._outcome(item)
                except Exception as bad:  # noqa: BLE001 - a malformed reply fails its step only
                    outcome = RemoteFailure(
                        f"the worker's reply could not be read: {bad!r}",
                        hint="run the same Stockade version on the driver and the workers",
                    )
                    self.host.recording.error(item.admission.spec, outcome)
                if isinstance(outcome, WorkerLost):
                    lost.append(item)
                settled.append((item.future, outcome))
        for item in lost:
            self._replace(item.slot, item.actor)
        with self._lock:
            for item in shipped:
                item.slot.busy -= 1
        for future, outcome in settled:
            if not isinstance(outcome, Done):
                future.set_exception(outcome)
            elif failed:
                future.set_exception(
                    RecorderFailed(
                        f"the command ran, but its result was not recorded: {failed[0]}",
                        hint="the result is attached to this error; check the recorder's storage",
                        result=outcome.result,
                    )
                )
            else:
                future.set_result(outcome)

    def _outcome(self, item: _Shipped) -> Done | StockadeError:
        """What one reply came to, recorded (in the collector's batch)."""
        import ray
        from ray.exceptions import RayActorError, TaskCancelledError, WorkerCrashedError

        spec, recording = item.admission.spec, self.host.recording
        where = item.slot.where if item.slot.actor is item.actor else {}
        try:
            reply = ray.get(item.future.ref)
        except TaskCancelledError:
            error: StockadeError = StepCancelled(
                "the step was cancelled, so its command and everything it started were killed"
            )
        except (RayActorError, WorkerCrashedError) as lost:
            error = WorkerLost(
                f"the worker running this step died before it gave a result back: {lost}",
                hint="the pool has started another worker; run the step again if it is safe to",
                details={"node": where.get("node", ""), "actor": where.get("actor", "")},
            )
        except ray.exceptions.RayError as failure:  # the worker raised what it should not
            error = RemoteFailure(
                f"the worker failed: {failure}", hint="see the worker's log (a Stockade bug)"
            )
        else:
            if "error" in reply:
                error = rebuilt(reply["error"])
            else:
                for seen in reply["connections"]:
                    recording.connection(spec.action_id, _Connection(**seen))
                carried = step_from_json(reply["carried"], Carried)
                result = self.host.breaker.finish(spec, carried, recording.result)  # + taints
                place = reply["where"]
                return Done(
                    result,
                    tuple(reply["files"]),
                    tuple(reply["left_out"]),
                    node=place["node"],
                    actor=place["actor"],
                )
            for seen in reply["connections"]:
                recording.connection(spec.action_id, _Connection(**seen))
        recording.error(spec, error)
        return error

    # --- the end ---------------------------------------------------------------------------

    def shutdown(self, *, timeout: float = 30.0) -> None:
        """Cancel every step still running (their commands are killed and recorded as
        cancelled), stop the workers, and close the driver's host."""
        import ray

        with self._lock:
            if self._closed:
                return
            self._closed = True
            running = list(self._shipped)
            self._lock.notify_all()
        for ref in running:
            ray.cancel(ref)
        self._collector.join(timeout)
        for slot in self._slots:
            with contextlib.suppress(Exception):
                ray.get(slot.actor.close.remote(), timeout=5)
            ray.kill(slot.actor)
        self.host.close()

    def __enter__(self) -> StockadePool:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.shutdown()


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


def _pinned(config: Config) -> Config:
    """``config`` with its store's path made absolute here: the driver's state folder
    (workspaces, quarantine, locks) is the one every worker uses, whatever its environment."""
    from stockade.record.store import store_path

    return attrs.evolve(
        config, store=attrs.evolve(config.store, path=os.path.abspath(store_path(config)))
    )


def _check_inputs(files: Mapping[str, bytes] | None) -> None:
    """Refuse input files that are not small.

    Raises:
        UsageError: they hold more than :data:`INPUT_BYTES` in all, or one is not bytes.
    """
    if not files:
        return
    total = 0
    for path, content in files.items():
        if not isinstance(content, bytes | str):
            raise UsageError(f"input file {path!r} is a {type(content).__name__}, not bytes")
        total += len(content)
    if total > INPUT_BYTES:
        raise UsageError(
            f"the input files hold {total} bytes; a request may carry at most {INPUT_BYTES}",
            hint="put large inputs on storage the workers share, and name them in the command",
            details={"bytes": total, "limit": INPUT_BYTES},
        )


__all__ = ["DEFAULT_PLACEMENT", "INPUT_BYTES", "Done", "StepFuture", "StockadePool"]
