"""The pool: warm hosts as Ray actors, driven from one process that decides and records.

    driver (this process)                          workers (Ray actors, any node)
    ExecRequest -> Host.admit (deciding; held steps stay here)
                -> placement event -> AdmittedStep (wire text) ──►  Doer: confine, execute,
                                                                    observe (the node's
    one signed chain  ◄── connection, quarantine, result / error ◄── sandbox) -> reply

The driver's :class:`~stockade.host.Host` decides every step exactly as a local run does
(classify, enforce, policy, hold). Each :class:`~stockade_ray.episode.Episode` is a run of
its own (its budget, taints, held steps and log), made from the pool's host at any time.
What comes back is appended to the driver's chain by one collecting thread, which outlives
every failure of a reply, a worker or a node (:mod:`stockade_ray.collect`).

Ray does the cluster, the scheduling, the transport and the cancellation; this module only
places steps on actors and records what comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import os
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import as_completed
from typing import TYPE_CHECKING, Any, cast

import attrs

from stockade import resolved
from stockade.config.schema import Config
from stockade.errors import PolicyHeld, RecorderFailed, StockadeError, UsageError
from stockade.host import Host
from stockade.request.spec import Budget, ExecRequest, Profile
from stockade.request.wire import step_to_json

from .collect import Collector, Held, Shipped, StepFuture
from .errors import WorkerLost
from .ledger import Ledger
from .tripped import Teller
from .tripped import actor_class as actor_class_of
from .worker import Caps, Worker
from .workers import Slot, Workers

if TYPE_CHECKING:
    from stockade.run.doer import Admission

    from .episode import Episode
    from .forks import Snapshot, Snapshots

INPUT_BYTES = 1024 * 1024
"""The most a request's input files may hold in all."""

DEFAULT_PLACEMENT: Mapping[str, Any] = {"num_cpus": 0}
"""Ray actor options when none are given: a worker mostly waits on its command, so it claims
no CPU; the pool places each worker on the live node holding the fewest of its workers."""

Item = ExecRequest | tuple[ExecRequest, Mapping[str, bytes]]


class StockadePool:
    """``size`` warm workers on a Ray cluster, fed by one deciding, recording driver.

    Ray must be initialized (``ray.init(...)``) before a pool is made.

    Args:
        size: how many workers.
        config: the configuration every worker and the driver use (embedded defaults when
            omitted); its store is the one chain.
        placement: Ray actor options for each worker (``num_cpus``, ``resources``,
            ``scheduling_strategy``, ...), for replacements too; when omitted the pool
            spreads the workers over the live nodes itself.
        environ: the ambient environment the driver filters children's from, and whose
            ``STOCKADE_DISABLE_PLUGINS`` the workers load their plugins with.
        caps: how much of the changed files comes back (:class:`~stockade_ray.worker.Caps`).
        plugins: extra plugin objects for the driver's host (policies, classifiers,
            recorders: everything that decides or records runs here, never on a worker).
        snapshots: how snapshots are taken and forked (:class:`~stockade_ray.forks.Snapshots`):
            handed to every worker, which forks with it on its node. Unless given, an
            overlay over the node's layers' snapshot where the worker may mount one (root),
            else hard links to it where its steps write through layers, else a copy
            (:class:`~stockade_ray.layered.LayeredSnapshots`);
            :class:`~stockade_ray.forks.CopySnapshots` always copies.
        shards: when more than 0, the pool's runs' events go to this many shard chains,
            anchored in the driver's (:mod:`stockade_ray.sharding`).
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
        snapshots: Snapshots | None = None,
        shards: int = 0,
    ) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from .layered import LayeredSnapshots

        if size < 1:
            raise UsageError(f"a pool needs at least one worker, not {size}")
        self.host = Host(_pinned(config or Config()), environ=environ, plugins=plugins)
        if shards > 0:
            from .sharding import ShardingRecorder

            ShardingRecorder.install(self.host, shards)
        self.caps = caps or Caps()
        self.snapshots: Snapshots = snapshots or LayeredSnapshots()
        env = self.host.environ
        worker_env = {k: env[k] for k in ("STOCKADE_DISABLE_PLUGINS",) if k in env}
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        self.ledger = ray.remote(Ledger).options(num_cpus=0, scheduling_strategy=here).remote()
        actor_class = actor_class_of(Worker)  # with the breaker's concurrency group
        args = (self.host.config, self.host.run_id, worker_env, self.ledger)
        self.places = Workers(actor_class, args, size, placement)
        self._lock = threading.Condition()
        self._sticky: dict[str, tuple[Slot, Any]] = {}  # a workspace's slot, and its actor
        self._moved: set[str] = set()  # sticky workspaces whose worker was lost, not yet met
        self._turn = itertools.count()
        self._episodes: dict[str, Episode] = {}
        self.collector = Collector(self)
        self.teller = Teller(self)  # the breaker's word to the workers' proxies

    @property
    def closed(self) -> bool:
        """Whether :meth:`shutdown` has begun."""
        return self.places.closed

    def workers(self) -> list[dict[str, str]]:
        """Where each live worker runs now: ``node``, ``actor``, ``hostname``, ``pid``."""
        with self._lock:
            return [dict(slot.where) for slot in self.places.slots if not slot.lost]

    # --- episodes ------------------------------------------------------------------------

    def episode(
        self,
        name: str | None = None,
        *,
        profile: Profile | None = None,
        budget: Budget | None = None,
        snapshot: Snapshot | None = None,
    ) -> Episode:
        """A new episode: a run of its own on one worker, in a workspace of its own (empty,
        or a fork of ``snapshot``); ``profile`` gives its settings (mode, network, private
        paths, what asks), ``budget`` its steps and duration."""
        from .episode import make_episode

        (made,) = make_episode(self, [name], profile=profile, budget=budget, snapshot=snapshot)
        return made

    def fork(
        self,
        snapshot: Snapshot,
        count: int,
        *,
        profile: Profile | None = None,
        budget: Budget | None = None,
    ) -> list[Episode]:
        """``count`` episodes forked from ``snapshot``, spread over the workers."""
        from .episode import make_episode

        names: list[str | None] = [None] * count
        return make_episode(self, names, profile=profile, budget=budget, snapshot=snapshot)

    def snapshot(self, folder: str, *, cap: int = 1024 * 1024 * 1024) -> Snapshot:
        """``folder`` (on the driver's node) as it is now, for :meth:`fork`."""
        return self.snapshots.take(resolved.realpath(folder), cap=cap)

    # --- shipping ------------------------------------------------------------------------

    def run(self, request: ExecRequest, *, files: Mapping[str, bytes] | None = None) -> StepFuture:
        """Decide ``request`` here, then ship it to a worker; its future. A step held for a
        person gives a future that waits (``future.held`` names it): approved, it runs on
        the pool and its result comes to the future; declined, the future raises.

        Raises:
            StockadeError: it was refused before it was shipped (denied, a bad input file,
                ...): as :meth:`stockade.host.Host.run` raises it.
        """
        return self._run_one(self.host, request, files, None)

    def _run_one(
        self,
        run: Host,
        request: ExecRequest,
        files: Mapping[str, bytes] | None,
        episode: Episode | None,
    ) -> StepFuture:
        (future,) = self.ship(run, [(0, request, files)], episode)
        if future.done() and future.exception() is not None:
            raise future.exception()  # type: ignore[misc]
        return future

    def map(self, requests: Iterable[Item], *, chunk: int = 64) -> Iterator[StepFuture]:
        """Ship every request (with its input files when given as a pair) and yield their
        futures as they finish (each knows its ``index``). A request refused before it was
        shipped yields a future holding its error."""
        futures = self._map(self.host, requests, chunk, None)
        for done in as_completed(futures):
            yield cast("StepFuture", done)

    def _map(
        self, run: Host, requests: Iterable[Item], chunk: int, episode: Episode | None
    ) -> list[StepFuture]:
        futures: list[StepFuture] = []
        batch: list[tuple[int, ExecRequest, Mapping[str, bytes] | None]] = []
        for index, item in enumerate(requests):
            request, files = item if isinstance(item, tuple) else (item, None)
            batch.append((index, request, files))
            if len(batch) == chunk:
                futures += self.ship(run, batch, episode)
                batch = []
        return futures + self.ship(run, batch, episode)

    async def arun(self, request: ExecRequest, *, files: Mapping[str, bytes] | None = None) -> Any:  # noqa: ANN401 - a Done
        """:meth:`run`, awaited: admitted on a thread (never on the event loop), then its
        result. Cancelling the awaiting task cancels the step (its command is killed)."""
        future = await asyncio.to_thread(self.run, request, files=files)
        return await awaited(future)

    async def amap(self, requests: Iterable[Item], *, chunk: int = 64) -> AsyncIterator[Any]:
        """:meth:`map`, awaited: admitted on a thread; yields each step's future as it ends."""
        futures = await asyncio.to_thread(self._map, self.host, list(requests), chunk, None)
        pending = {asyncio.wrap_future(f): f for f in futures}
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for waited in done:
                waited.exception()  # retrieved here; the caller reads it from the future
                yield pending.pop(waited)

    def ship(
        self,
        run: Host,
        batch: list[tuple[int, ExecRequest, Mapping[str, bytes] | None]],
        episode: Episode | None,
    ) -> list[StepFuture]:
        """Admit a batch (as steps of ``run``) and record their placements in one
        transaction; once that is stored, ship each admitted step to its worker."""
        if self.closed:
            raise UsageError("the pool is shut down", hint="make a new StockadePool")
        futures, ready = [], []
        with self.batch() as failed:
            for index, request, files in batch:
                future = StepFuture(index)
                futures.append(future)
                try:
                    _check_inputs(files)
                    admission = run.admit(self._in(request, episode))
                except PolicyHeld as held:
                    self.collector.hold(Held(future, run, dict(files or {}), episode), held)
                    continue
                except StockadeError as error:
                    future.set_exception(error)
                    continue
                future.action_id = admission.spec.action_id
                sticky = admission.step.agent.own_workspace or request.workspace is not None
                try:
                    ready.append(
                        self.place(future, admission, run, files, episode=episode, sticky=sticky)
                    )
                except StockadeError as error:  # admitted, yet nowhere to run: recorded so
                    with contextlib.suppress(StockadeError):
                        self.host.recording.error(admission.spec, error)
                    future.set_exception(error)
        if failed:  # nothing of the batch is recorded, so nothing of it runs
            for shipped in ready:
                shipped.future.set_exception(failed[0])
                shipped.slot.busy -= 1
            return futures
        for shipped in ready:
            self.send(shipped)
        return futures

    @staticmethod
    def _in(request: ExecRequest, episode: Episode | None) -> ExecRequest:
        return request if episode is None else attrs.evolve(request, profile=episode.name)

    def place(
        self,
        future: StepFuture,
        admission: Admission,
        run: Host,
        files: Mapping[str, bytes] | None,
        *,
        episode: Episode | None,
        held: tuple[str, int] | None = None,
        sticky: bool = True,
    ) -> Shipped:
        """Choose a step's worker and record its placement (in the caller's batch)."""
        slot = self._slot(admission, episode, sticky=sticky)
        inputs = {p: hashlib.sha256(_bytes(c)).hexdigest() for p, c in (files or {}).items()}
        try:
            self.host.recording.placement(
                admission.spec.action_id,
                node=slot.where["node"],
                actor=slot.where["actor"],
                hostname=slot.where["hostname"],
                inputs=inputs,
            )
        except BaseException:
            slot.busy -= 1
            raise
        actor, future.worker = slot.actor, dict(slot.where)
        return Shipped(future, admission, run, slot, actor, dict(files or {}), episode, held)

    def send(self, shipped: Shipped) -> None:
        """Hand a placed step to its worker, and to the collector."""
        admission = shipped.admission
        try:
            self.teller.before_send(shipped)  # a tripped run's word reaches its worker first
        except WorkerLost as error:
            shipped.slot.busy -= 1
            with contextlib.suppress(StockadeError):
                self.host.recording.error(admission.spec, error)
            shipped.future.set_exception(error)
            return
        with self._lock:  # the first step after its worker was lost checks it is still there
            moved = shipped.episode is None and admission.spec.workspace in self._moved
            self._moved.discard(admission.spec.workspace)
        shipped.future.ref = shipped.actor.carry.remote(
            step_to_json(admission.step), dict(admission.secrets), shipped.files, self.caps, moved
        )
        self.collector.watch(shipped)

    def _slot(self, admission: Admission, episode: Episode | None, *, sticky: bool) -> Slot:
        """The worker for a step: its episode's, the one its workspace sticks to, else the
        least busy live one.

        Raises:
            WorkerLost: its episode's worker was lost and is not replaced yet (nothing of
                the step ran).
        """
        if (
            episode is not None
            and not episode.slot.lost
            and episode.slot.actor is not episode.actor
        ):
            episode.rehome()  # its worker was replaced: its workspace is brought back there
        with self._lock:
            if episode is not None:
                slot = episode.slot
                if slot.lost or slot.actor is not episode.actor:
                    raise WorkerLost(
                        f"the worker holding episode {episode.name}'s workspace was lost, "
                        "and its replacement is still starting; nothing of the step ran",
                        hint="run it again in a moment: the episode goes on on the replacement",
                        details={"started": False, **_named(episode.where)},
                    )
            else:
                key = admission.spec.workspace if sticky else None
                held = self._sticky.get(key) if key is not None else None
                if held is not None and not held[0].lost and held[0].actor is held[1]:
                    slot = held[0]
                else:
                    if held is not None:  # its worker was lost: its folder may be gone too
                        self._moved.add(admission.spec.workspace)
                    slot = self.least_busy()
                    if key is not None:
                        self._sticky[key] = (slot, slot.actor)
            slot.busy += 1
            return slot

    def least_busy(self) -> Slot:
        """The live worker with the fewest steps (taking turns among equals).

        Raises:
            WorkerLost: every worker is being replaced.
        """
        live = [slot for slot in self.places.slots if not slot.lost]
        if not live:
            raise WorkerLost(
                "every worker of the pool is lost and being replaced; nothing of the step ran",
                hint="run it again in a moment",
                details={"started": False},
            )
        turn = next(self._turn)
        return min((live[(turn + i) % len(live)] for i in range(len(live))), key=lambda s: s.busy)

    @contextlib.contextmanager
    def batch(self) -> Iterator[list[BaseException]]:
        """The recorders' batch for this thread (every recorder's: the
        ``stockade_record_batch`` seam); ``failed`` holds its failure, if any."""
        failed: list[BaseException] = []
        try:
            with self.host.recording.batch():
                yield failed
        except StockadeError as error:
            failed.append(
                RecorderFailed(
                    f"a recorder failed, so the steps were not shipped: {error}",
                    hint="check the recorder's storage",
                )
            )

    # --- held steps ----------------------------------------------------------------------

    def approve(self, run_id: str, step: int, *, by: str) -> None:
        """Approve a held step of this pool: it runs on the pool, and its result comes to
        the future its request gave."""
        self.collector.run_of(run_id).answer(run_id, step, approve=True, by=by)
        self.collector.wake()

    def decline(self, run_id: str, step: int, *, by: str) -> None:
        """Decline a held step of this pool: its future raises ``PolicyDenied``."""
        self.collector.run_of(run_id).answer(run_id, step, approve=False, by=by)
        self.collector.wake()

    # --- the end -------------------------------------------------------------------------

    def shutdown(self, *, timeout: float = 30.0) -> None:
        """Cancel every step still running (their commands are killed and recorded as
        cancelled, or lost), release every waiter (held steps too), stop the workers, and
        close the driver's host and its episodes' runs."""
        import ray

        if self.closed:
            return
        self.places.closed = True
        self.collector.stop(timeout)
        self.places.close()
        for episode in list(self._episodes.values()):
            episode.end()
        with contextlib.suppress(Exception):
            ray.kill(self.ledger, no_restart=True)
        self.host.close()

    def __enter__(self) -> StockadePool:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.shutdown()


async def awaited(future: StepFuture) -> Any:  # noqa: ANN401 - a Done
    """A step's outcome, awaited; cancelling the awaiting task cancels the step."""
    import ray

    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        if future.ref is not None:
            ray.cancel(future.ref)
        raise


def _named(where: Mapping[str, str]) -> dict[str, str]:
    return {"node": where.get("node", ""), "actor": where.get("actor", "")}


def _bytes(content: bytes | str) -> bytes:
    return content.encode() if isinstance(content, str) else content


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
            hint="put large inputs in a snapshot (pool.snapshot, pool.fork)",
            details={"bytes": total, "limit": INPUT_BYTES},
        )


__all__ = ["DEFAULT_PLACEMENT", "INPUT_BYTES", "StepFuture", "StockadePool", "awaited"]
