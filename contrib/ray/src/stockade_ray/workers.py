"""The pool's places: one slot per worker, where it runs, and its replacement when it is lost.

With the default placement the pool places each worker itself, on the live node holding
the fewest of its workers (Ray's ``SPREAD`` alone put 3 of 4 workers on one node of two);
given options (``resources``, a ``scheduling_strategy``, ...) are used as they are, for
replacements too. A worker lost with its node is replaced on another node: never on a node
the cluster reports dead, nor on one where a worker was lost moments ago until the cluster
has said whether that node lives (a killed raylet's node still looks alive for seconds). A
replacement is started on a thread of its own, so neither the caller nor the thread that
collects results ever waits on it; a slot being replaced takes no steps.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

import attrs

from stockade.errors import UsageError

START_TIMEOUT = 120.0
"""Seconds a new worker may take to say where it runs."""

WAIT_SLICE = 0.25
"""Seconds a replacement's start is waited for between looks at whether the pool closed."""

SUSPECT_SECONDS = 15.0
"""How long a node where a worker was lost takes no new worker while the cluster still
calls it alive."""


@attrs.define(eq=False)
class Slot:
    """One place in the pool: the actor now serving it and where that actor runs.

    ``lost`` while its actor is gone and a replacement is being started."""

    actor: Any
    where: dict[str, str]
    busy: int = 0
    lost: bool = False


class Closing(Exception):
    """The pool closed while a replacement was being started."""


class Workers:
    """``size`` workers made from ``actor_class`` (a Ray actor class) with ``args``."""

    def __init__(
        self,
        actor_class: Any,  # noqa: ANN401 - a Ray actor class
        args: tuple[Any, ...],
        size: int,
        placement: Mapping[str, Any] | None,
    ) -> None:
        self._class, self._args = actor_class, args
        self._spread = placement is None
        self._options: dict[str, Any] = {"num_cpus": 0} if placement is None else dict(placement)
        self.dead: set[str] = set()
        self._suspect: dict[str, float] = {}
        self._lock = threading.Lock()
        self._replacing: list[threading.Thread] = []
        self.closed = False
        self.slots: list[Slot] = []
        self.slots = self._launch(size)

    # --- nodes ---------------------------------------------------------------------------

    def _live_nodes(self) -> list[str]:
        """The nodes the cluster calls alive, less those dead or suspect to this pool."""
        import ray

        now, live = time.monotonic(), []
        for node in ray.nodes():
            node_id = str(node["NodeID"])
            if not node["Alive"]:
                self.dead.add(node_id)
                continue
            if now - self._suspect.get(node_id, -SUSPECT_SECONDS) < SUSPECT_SECONDS:
                continue
            if node_id not in self.dead:
                live.append(node_id)
        return live

    def _options_for(self, taken: dict[str, int]) -> dict[str, Any]:
        """Actor options for one new worker (and the node it is pinned to, counted)."""
        if not self._spread:
            return {"max_concurrency": 1, **self._options}
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        live = self._live_nodes()
        if not live:
            raise UsageError("no live node takes a worker now", hint="add a node to the cluster")
        node = min(live, key=lambda n: taken.get(n, 0))
        taken[node] = taken.get(node, 0) + 1
        strategy = NodeAffinitySchedulingStrategy(node, soft=False)
        return {"max_concurrency": 1, **self._options, "scheduling_strategy": strategy}

    def _taken(self) -> dict[str, int]:
        taken: dict[str, int] = {}
        for slot in self.slots:
            if not slot.lost:
                taken[slot.where["node"]] = taken.get(slot.where["node"], 0) + 1
        return taken

    # --- starting ------------------------------------------------------------------------

    def _launch(self, count: int) -> list[Slot]:
        """``count`` new workers, started together; once each says where it runs."""
        import ray

        taken = self._taken()
        actors = [
            self._class.options(**self._options_for(taken)).remote(*self._args)
            for _ in range(count)
        ]
        try:
            places = ray.get([actor.where.remote() for actor in actors], timeout=START_TIMEOUT)
        except Exception:
            for actor in actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)
            raise
        return [Slot(actor, dict(place)) for actor, place in zip(actors, places, strict=True)]

    def lose(self, slot: Slot, actor: Any) -> None:  # noqa: ANN401 - a Ray actor handle
        """``actor`` of ``slot`` died: it is killed for good (a worker cut off by the network
        must not go on running its step) and a replacement is started on its own thread."""
        import ray

        with self._lock:
            if slot.actor is not actor or slot.lost or self.closed:
                return
            slot.lost = True
            self._suspect[slot.where.get("node", "")] = time.monotonic()
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)
        thread = threading.Thread(
            target=self._replace, args=(slot,), name="stockade-ray-replace", daemon=True
        )
        with self._lock:
            self._replacing = [t for t in self._replacing if t.is_alive()]
            self._replacing.append(thread)
        thread.start()

    def _replace(self, slot: Slot) -> None:
        """Start workers until one runs on a live node; it then serves ``slot``."""
        pause = 0.5
        while not self.closed:
            try:
                with self._lock:
                    taken = self._taken()
                fresh = self._launch_one(taken)
            except (SystemExit, KeyboardInterrupt, Closing):
                return  # the pool, or Ray itself, is shutting down in this process
            except Exception as error:  # noqa: BLE001 - retried: the cluster is settling
                print(f"stockade-ray: a replacement worker failed: {error!r}", file=sys.stderr)
                self._pause(pause)
                pause = min(pause * 2, 5.0)
                continue
            with self._lock:
                if self.ended():  # another thread may have closed the pool meanwhile
                    self._kill(fresh.actor)
                    return
                slot.actor, slot.where, slot.lost = fresh.actor, fresh.where, False
            return

    def _launch_one(self, taken: dict[str, int]) -> Slot:
        import ray

        actor = self._class.options(**self._options_for(taken)).remote(*self._args)
        try:
            place = dict(ray.get(self._started(actor.where.remote())))
            if place["node"] in self.dead or place["node"] not in {
                str(n["NodeID"]) for n in ray.nodes() if n["Alive"]
            }:
                raise UsageError(f"the replacement landed on node {place['node']}, which is dead")
        except Exception:
            self._kill(actor)
            raise
        return Slot(actor, place)

    def _started(self, ref: Any) -> Any:  # noqa: ANN401 - a Ray object ref
        """``ref`` once ready, looked at in slices so that a closing pool is not kept waiting.

        Raises:
            Closing: the pool closed meanwhile.
            GetTimeoutError: the worker did not say where it runs within START_TIMEOUT.
        """
        import ray
        from ray.exceptions import GetTimeoutError

        deadline = time.monotonic() + START_TIMEOUT
        while not self.closed:
            left = deadline - time.monotonic()
            if left <= 0:
                raise GetTimeoutError(f"a new worker did not start within {START_TIMEOUT:.0f} s")
            ready, _ = ray.wait([ref], timeout=min(WAIT_SLICE, left))
            if ready:
                return ref
        raise Closing

    def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if the pool closes meanwhile."""
        deadline = time.monotonic() + seconds
        while not self.closed and time.monotonic() < deadline:
            time.sleep(min(WAIT_SLICE, seconds))

    def ended(self) -> bool:
        """Whether the pool is closing."""
        return self.closed

    @staticmethod
    def _kill(actor: Any) -> None:  # noqa: ANN401 - a Ray actor handle
        import ray

        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)

    def close(self, *, timeout: float = 5.0) -> None:
        """Stop every worker: asked to release its helpers (for at most ``timeout`` in all),
        then killed."""
        import ray

        with self._lock:
            self.closed = True
            slots = list(self.slots)
        refs = []
        for slot in slots:
            if not slot.lost:
                with contextlib.suppress(Exception):
                    refs.append(slot.actor.close.remote())
        with contextlib.suppress(Exception):
            ray.wait(refs, num_returns=len(refs), timeout=timeout)
        for slot in slots:
            self._kill(slot.actor)
        # Each replacement thread sees `closed` within a slice, kills what it started, and
        # ends: once this returns, no thread of the pool calls Ray.
        with self._lock:
            replacing = list(self._replacing)
        for thread in replacing:
            thread.join(timeout + WAIT_SLICE * 4)
