"""An episode: one rollout, a run of its own on one worker of the pool.

``pool.episode()`` (or ``pool.fork(snapshot, n)``) makes one at any time, with no profile
declared first: its own run id (so its own step and duration budget, its own taints, its
own held steps, and ``stockade log --run RUN`` shows only its steps), and a workspace of its
own, empty or forked from a snapshot, on the one worker it sticks to. ``annotate`` puts a
reward or a grader's verdict into the signed record beside its commands; ``export`` gives
its workspace, or its changes since the fork, as a tar stream; ``close`` ends the run and
keeps the workspace, ``discard`` removes it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from stockade.errors import UsageError
from stockade.record import events
from stockade.request.spec import Budget, ExecRequest, Profile, new_run_id

from .forks import EXPORT_BYTES, Export, Forked, Snapshot, TooLarge

if TYPE_CHECKING:
    from stockade.host import Host

    from .collect import Done, StepFuture
    from .pool import Item, StockadePool
    from .workers import Slot


class Episode:
    """One rollout on the pool (made by :meth:`StockadePool.episode
    <stockade_ray.pool.StockadePool.episode>` or ``fork``).

    Attributes:
        name: its profile's name (``ep-...``), which its requests run under.
        run_id: its run: what its budget counts, what names its held steps and its log.
        workspace: its workspace's path (on its worker's node).
        snapshot: the snapshot it was forked from, if any.
        forked: how its workspace was forked (``overlay``, ``layers`` or ``copy``, and why),
            if it was.
        rehomed: each time its worker was lost and the episode went on on the replacement:
            ``workspace`` (``kept``: as its last finished step left it; ``re-forked``: from
            its snapshot, the changes of its ``steps`` steps so far lost; ``empty``), ``from``
            and ``to`` (the workers). Each is in the signed record too (a ``rehome``
            annotation by ``stockade-ray``).
        where: its worker (``node``, ``actor``, ``hostname``, ``pid``).
    """

    def __init__(
        self,
        pool: StockadePool,
        run: Host,
        name: str,
        slot: Slot,
        snapshot: Snapshot | None,
        *,
        forked: Forked | None = None,
    ) -> None:
        self.pool, self.run_host, self.name = pool, run, name
        self.run_id = run.run_id
        self.slot, self.actor, self.where = slot, slot.actor, dict(slot.where)
        self.snapshot, self.forked = snapshot, forked
        self.workspace = _workspace(run, name)  # a layered fork's is its profile's
        self.rehomed: list[dict[str, Any]] = []
        self.ended = False
        self._homing = threading.Lock()

    def _check(self) -> None:
        if self.ended:
            raise UsageError(f"episode {self.name} is closed", hint="make a new episode")

    def run(self, request: ExecRequest, *, files: Mapping[str, bytes] | None = None) -> StepFuture:
        """One step of the episode (``request.profile`` is replaced by the episode's): as
        :meth:`StockadePool.run <stockade_ray.pool.StockadePool.run>`."""
        self._check()
        self._home()
        return self.pool._run_one(self.run_host, request, files, self)

    def map(self, requests: Iterable[Item], *, chunk: int = 64) -> list[StepFuture]:
        """Its steps, all shipped now (they run one after another on its worker)."""
        self._check()
        self._home()
        return self.pool._map(self.run_host, requests, chunk, self)

    def _home(self) -> None:
        """A fork's workspace brought back before a step is admitted, when its worker was
        replaced: the step's folder is the fork's, which admission checks is there."""
        fork = self.forked is not None and self.forked.method in ("overlay", "layers")
        if fork and not self.slot.lost and self.slot.actor is not self.actor:
            self.rehome()

    async def arun(self, request: ExecRequest, *, files: Mapping[str, bytes] | None = None) -> Done:
        """:meth:`run`, awaited (admitted on a thread, never on the event loop)."""
        from .pool import awaited

        future = await asyncio.to_thread(self.run, request, files=files)
        done: Done = await awaited(future)
        return done

    def rehome(self) -> None:
        """Bring its workspace to the worker that replaced its lost one (the pool calls this
        when it places the episode's next step): ``kept`` where the folder survives on the
        new worker's node, else forked again from its snapshot, else empty; said in
        :attr:`rehomed` and in the record.

        Raises:
            WorkerLost: the replacement was lost too (nothing of a step ran).
        """
        import ray

        from .errors import WorkerLost

        with self._homing:
            actor, where = self.slot.actor, dict(self.slot.where)
            if actor is self.actor:
                return  # another thread brought it over
            base = self.forked.base if self.forked is not None else ""
            try:
                got = ray.get(actor.rehome.remote(self.workspace, self.snapshot, base), timeout=120)
            except (ray.exceptions.RayError, TimeoutError) as error:
                raise WorkerLost(
                    f"episode {self.name}'s replacement worker was lost too: {error}",
                    hint="run the step again in a moment",
                    details={"started": False, "node": where["node"], "actor": where["actor"]},
                ) from None
            steps = self._last_step()
            note = {"workspace": got["workspace"], "files": got["files"], "steps": steps,
                    "from": dict(self.where), "to": where}  # fmt: skip
            lost = {"kept": "nothing of its landed work is lost",
                    "re-forked": f"forked again from its snapshot: the changes of its {steps} "
                    "steps so far are lost",
                    "empty": f"its workspace is empty: the files of its {steps} steps so far "
                    "are lost"}[got["workspace"]]  # fmt: skip
            self.pool.host.recording.annotation(
                events.AnnotationEvent(
                    "annotation-" + new_run_id(),
                    run_id=self.run_id,
                    step=steps,
                    name="rehome",
                    verdict=got["workspace"],
                    detail=f"worker {self.where['actor']} on node {self.where['node']} was "
                    f"lost; the episode goes on on {where['actor']} (node {where['node']}): "
                    + lost,
                    by="stockade-ray",
                )
            )
            self.rehomed.append(note)
            self.actor, self.where = actor, where

    def annotate(
        self,
        name: str,
        *,
        score: float | None = None,
        verdict: str = "",
        detail: str = "",
        by: str = "",
    ) -> None:
        """Put a verdict on the episode into the signed record: a reward, a grader's score
        or pass, beside the commands it judges (``stockade verify`` checks it with them)."""
        if score is None and not verdict:
            raise UsageError("an annotation needs a score or a verdict")
        event = events.AnnotationEvent(
            "annotation-" + new_run_id(),
            run_id=self.run_id,
            step=self._last_step(),
            name=name,
            score=None if score is None else float(score),
            verdict=verdict,
            detail=detail,
            by=by,
        )
        self.pool.host.recording.annotation(event)

    def export(self, *, changes: bool = False, cap: int = EXPORT_BYTES) -> Export:
        """Its workspace (or, with ``changes``, what changed since its fork: new and changed
        files, and the names of the deleted) as a tar stream, from its worker.

        Raises:
            TooLarge: it holds more than ``cap`` bytes.
            WorkerLost: its worker was lost, and its workspace with it.
        """
        import ray

        from .errors import rebuilt

        try:
            got = ray.get(self.actor.export.remote(self.workspace, cap, changes))
        except ray.exceptions.RayError as error:
            from .errors import WorkerLost

            raise WorkerLost(
                f"episode {self.name}'s worker is lost, and its workspace with it: {error}",
                details={"started": False},
            ) from None
        if isinstance(got, dict):
            refused = rebuilt(got["error"])
            raise TooLarge(refused.message, hint=refused.hint, details=refused.details)
        return got  # type: ignore[no-any-return]

    def steps(self) -> list[dict[str, Any]]:
        """Its recorded steps, summarised as ``stockade log --run`` shows them (from its
        shard when the pool shards its record)."""
        from stockade.cli.record import steps
        from stockade.record.chain import rows

        from .sharding import NAME, ShardingRecorder

        recorder = self.pool.host.pm.get_plugin(NAME)
        if not isinstance(recorder, ShardingRecorder):
            return steps(rows(self.pool.host.store, self.run_id))
        shard = recorder.store_of(self.run_id)
        try:
            return steps(rows(shard, self.run_id))
        finally:
            shard.close()

    def _last_step(self) -> int:
        """Its last step recorded (or held)."""
        from .sharding import NAME, ShardingRecorder

        held = self.run_host.store.last_step(self.run_id)
        recorder = self.pool.host.pm.get_plugin(NAME)
        if not isinstance(recorder, ShardingRecorder):
            return held
        shard = recorder.store_of(self.run_id)
        try:
            return max(held, shard.last_step(self.run_id))
        finally:
            shard.close()

    def close(self) -> None:
        """End the episode's run (its home removed); its workspace stays on its worker."""
        self.end(remove=False)

    def discard(self) -> None:
        """End the episode's run and remove its workspace."""
        self.end(remove=True)

    def end(self, *, remove: bool = False) -> None:
        if self.ended:
            return
        self.ended = True
        self.pool._episodes.pop(self.run_id, None)
        self.slot.busy -= 1
        if not self.slot.lost and self.slot.actor is self.actor:
            import ray

            with contextlib.suppress(Exception):  # its worker is gone already
                ray.get(
                    self.actor.forget.remote(self.run_id, self.workspace, remove=remove), timeout=30
                )
        self.run_host.close()

    def __enter__(self) -> Episode:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _workspace(run: Host, name: str) -> str:
    from stockade.workspace.folders import workspace_of

    found = workspace_of(run.config, run.config.profile(name), own=True)
    return found or ""  # an episode's profile always has a workspace of its own


def make_episode(
    pool: StockadePool,
    names: Sequence[str | None],
    *,
    profile: Profile | None,
    budget: Budget | None,
    snapshot: Snapshot | None,
) -> list[Episode]:
    """Episodes named ``names`` (``None``: a new name each), each on the least busy worker,
    its workspace forked from ``snapshot`` there when one is given (from the node's layers
    where it has them, else a copy: ``Episode.forked`` says which)."""
    import ray

    from stockade.config.schema import store_folder

    if pool.closed:
        raise UsageError("the pool is shut down", hint="make a new StockadePool")
    template = profile or Profile(name="episode")
    placed: list[tuple[str, Slot]] = []
    for given in names:
        name = given or f"ep-{secrets.token_hex(6)}"
        if name == "default" or name in pool.host.config.agents:
            raise UsageError(f"episode name {name!r} is a configured profile's")
        with pool._lock:
            slot = pool.least_busy()
            slot.busy += 1  # counted while it lives, so the next episode goes elsewhere
        placed.append((name, slot))
    forks: list[Forked | None] = [None] * len(placed)
    if snapshot is not None:
        own = os.path.join(store_folder(pool.host.config), "workspaces")
        try:
            forks = ray.get(
                [
                    slot.actor.seed.remote(os.path.join(own, name), snapshot, pool.snapshots)
                    for name, slot in placed
                ]
            )
        except BaseException:
            for _, slot in placed:
                slot.busy -= 1
            raise
    made: list[Episode] = []
    for (name, slot), forked in zip(placed, forks, strict=True):
        mine = attrs.evolve(template, name=name, workspace=None)
        if forked is not None and forked.method in ("overlay", "layers"):
            mine = attrs.evolve(mine, workspace=forked.workspace)  # where core forks
        if budget is not None:
            mine = attrs.evolve(mine, budget=budget)
        run = pool.host.for_run(profiles={name: mine})
        episode = Episode(pool, run, name, slot, snapshot, forked=forked)
        pool._episodes[run.run_id] = episode
        pool.collector.runs[run.run_id] = run
        made.append(episode)
    return made
