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
import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from stockade.errors import UsageError
from stockade.record import events
from stockade.request.spec import Budget, ExecRequest, Profile

from .forks import EXPORT_BYTES, Export, Snapshot, TooLarge

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
        where: its worker (``node``, ``actor``, ``hostname``, ``pid``).
    """

    def __init__(
        self, pool: StockadePool, run: Host, name: str, slot: Slot, snapshot: Snapshot | None
    ) -> None:
        self.pool, self.run_host, self.name = pool, run, name
        self.run_id = run.run_id
        self.slot, self.actor, self.where = slot, slot.actor, dict(slot.where)
        self.snapshot = snapshot
        self.workspace = _workspace(run, name)
        self.ended = False

    def _check(self) -> None:
        if self.ended:
            raise UsageError(f"episode {self.name} is closed", hint="make a new episode")

    def run(self, request: ExecRequest, *, files: Mapping[str, bytes] | None = None) -> StepFuture:
        """One step of the episode (``request.profile`` is replaced by the episode's): as
        :meth:`StockadePool.run <stockade_ray.pool.StockadePool.run>`."""
        self._check()
        return self.pool._run_one(self.run_host, request, files, self)

    def map(self, requests: Iterable[Item], *, chunk: int = 64) -> list[StepFuture]:
        """Its steps, all shipped now (they run one after another on its worker)."""
        self._check()
        return self.pool._map(self.run_host, requests, chunk, self)

    async def arun(self, request: ExecRequest, *, files: Mapping[str, bytes] | None = None) -> Done:
        """:meth:`run`, awaited (admitted on a thread, never on the event loop)."""
        from .pool import awaited

        future = await asyncio.to_thread(self.run, request, files=files)
        done: Done = await awaited(future)
        return done

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
        from stockade.request.spec import new_run_id

        if score is None and not verdict:
            raise UsageError("an annotation needs a score or a verdict")
        event = events.AnnotationEvent(
            "annotation-" + new_run_id(),
            run_id=self.run_id,
            step=self.run_host.store.last_step(self.run_id),
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
        """Its recorded steps, summarised as ``stockade log --run`` shows them."""
        from stockade.cli.record import steps
        from stockade.record.chain import rows

        return steps(rows(self.pool.host.store, self.run_id))

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
    its workspace forked from ``snapshot`` there when one is given."""
    import ray

    if pool.closed:
        raise UsageError("the pool is shut down", hint="make a new StockadePool")
    template = profile or Profile(name="episode")
    made: list[Episode] = []
    for given in names:
        name = given or f"ep-{secrets.token_hex(6)}"
        if name == "default" or name in pool.host.config.agents:
            raise UsageError(f"episode name {name!r} is a configured profile's")
        own = attrs.evolve(template, name=name, workspace=None)
        if budget is not None:
            own = attrs.evolve(own, budget=budget)
        run = pool.host.for_run(profiles={name: own})
        with pool._lock:
            slot = pool.least_busy()
            slot.busy += 1  # counted while it lives, so the next episode goes elsewhere
        episode = Episode(pool, run, name, slot, snapshot)
        pool._episodes[run.run_id] = episode
        pool.collector.runs[run.run_id] = run
        made.append(episode)
    if snapshot is not None:
        archive = snapshot.data
        seeded = [
            e.actor.seed.remote(e.workspace, snapshot.digest, archive, pool.snapshots) for e in made
        ]
        ray.get(seeded)
    return made
