"""The breaker's check where bytes leave, on every worker: the driver tells the workers.

A worker's egress proxy asks, before each read it sends upstream, whether the step's run
holds both private data and somebody else's words (as the in-process host's proxy asks
:meth:`stockade.policy.breaker.Breaker.at_connection`). Only the driver counts a run's taints,
so the driver tells: when its breaker counts a run coming to hold both
(:attr:`~stockade.policy.breaker.Breaker.on_both`), :class:`Teller` hands the reason to every
live worker and waits until each has it, before the step that tripped it is recorded, shipped
or settled. A worker keeps it (:class:`Tripped`) for as long as it lives, and its proxies ask
it without a round trip.

Fail closed, by construction:

- A worker that does not say it has the reason within :data:`TELL_SECONDS` is lost: killed
  (its commands die with it: the executor's warden kills a command whose parent died) and
  replaced, as a worker that died.
- A step shipped to a worker that was not told (a replacement started meanwhile) is preceded
  by the reason, awaited, or it is not shipped.
- The driver gone: workers are actors the driver owns, and Ray ends an actor whose owner
  died (fate sharing), with its commands. No worker goes on with a state nobody updates.

The reason goes on its own concurrency group (:data:`GROUP`), so a worker busy with a step
(one at a time) takes it at once.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stockade.policy.breaker import OPT_OUT
from stockade.policy.taints import REFUSED

from .errors import WorkerLost

if TYPE_CHECKING:
    from stockade.host import Host
    from stockade.request.step import AdmittedStep

    from .collect import Shipped
    from .pool import StockadePool

GROUP = "breaker"
"""The workers' concurrency group the breaker's word travels on (beside the steps)."""

TELL_SECONDS = 10.0
"""How long a worker may take to say it has a run's reason before it is lost."""


def actor_class(worker: type) -> Any:  # noqa: ANN401 - a Ray actor class
    """``worker`` as a Ray actor class with the breaker's own concurrency group."""
    import ray

    return ray.remote(concurrency_groups={GROUP: 1})(worker)


class Tripped:
    """A worker's side: the runs it was told hold both kinds, and its proxies' check."""

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}
        self._lock = threading.Lock()

    def trip(self, run_id: str, reason: str) -> None:
        """Run ``run_id`` holds both kinds, for ``reason`` (kept for the worker's life)."""
        with self._lock:
            self._reasons.setdefault(run_id, reason)

    def check(self, step: AdmittedStep) -> Callable[[], str | None] | None:
        """The check ``step``'s proxy asks on each connection and before each read it sends
        upstream: the breaker's reason once the step's run holds both; ``None`` (no check)
        for a step a person approved after its run held both, or whose profile opts out."""
        over = step.egress is not None and step.egress.over_breaker
        if over or step.agent.profile.breaker == OPT_OUT:
            return None
        run_id, reasons = step.spec.run_id, self._reasons

        def check() -> str | None:
            found = reasons.get(run_id)  # one dict read: no round trip, no lock
            return None if found is None else REFUSED + found

        return check

    def held(self) -> dict[str, str]:
        """The runs this worker was told of, with their reasons."""
        with self._lock:
            return dict(self._reasons)


class Teller:
    """The driver's side: tells every live worker of the pool when one of its runs comes to
    hold both kinds, and a worker that was not told before a step of such a run reaches it."""

    def __init__(self, pool: StockadePool) -> None:
        self.pool = pool
        self.reasons: dict[str, str] = {}
        self._told: dict[str, set[str]] = {}  # run -> the actors that have its reason
        self._watched: weakref.WeakSet[Host] = weakref.WeakSet()
        self._lock = threading.Lock()
        self.watch(pool.host)

    def watch(self, run: Host) -> None:
        """Tell the workers when ``run`` (the pool's, an episode's) comes to hold both."""
        with self._lock:
            if run in self._watched:
                return
            self._watched.add(run)
        run.breaker.on_both = lambda reason: self.tell(run.run_id, reason)
        already = run.breaker.both()  # counted before it was watched
        if already is not None:
            self.tell(run.run_id, already)

    def tell(self, run_id: str, reason: str) -> None:
        """Hand ``reason`` to every live worker and wait for each; one that does not answer
        within :data:`TELL_SECONDS` is lost (killed, so its commands die, and replaced)."""
        import ray

        with self._lock:
            self.reasons.setdefault(run_id, reason)
            told = self._told.setdefault(run_id, set())
        slots = [slot for slot in self.pool.places.slots if not slot.lost]
        calls = [(s, s.actor, s.where["actor"], _trip(s.actor, run_id, reason)) for s in slots]
        for slot, actor, actor_id, call in calls:
            try:
                ray.get(call, timeout=TELL_SECONDS)
            except Exception:  # noqa: BLE001 - not told in time: it must not go on
                self.pool.places.lose(slot, actor)
                continue
            with self._lock:
                told.add(actor_id)

    def before_send(self, shipped: Shipped) -> None:
        """Before a step is shipped: its run watched, and its worker told when the run holds
        both already and that worker was not told (a replacement started since).

        Raises:
            WorkerLost: the worker did not take the reason in time (nothing of the step ran;
                the worker is lost).
        """
        import ray

        self.watch(shipped.run)
        run_id = shipped.run.run_id
        with self._lock:
            reason = self.reasons.get(run_id)
            actor_id = shipped.slot.where["actor"]
            if reason is None or actor_id in self._told.get(run_id, set()):
                return
        try:
            ray.get(_trip(shipped.actor, run_id, reason), timeout=TELL_SECONDS)
        except Exception:  # noqa: BLE001 - not told in time: it must not run the step
            self.pool.places.lose(shipped.slot, shipped.actor)
            raise WorkerLost(
                "the worker did not take the breaker's word for its run in time, so it was "
                "lost; nothing of the step ran",
                hint="run it again in a moment: a replacement is starting",
                details={"started": False, "actor": actor_id},
            ) from None
        with self._lock:
            self._told.setdefault(run_id, set()).add(actor_id)


def _trip(actor: Any, run_id: str, reason: str) -> Any:  # noqa: ANN401 - Ray handles
    return actor.trip.options(concurrency_group=GROUP).remote(run_id, reason)


__all__ = ["GROUP", "TELL_SECONDS", "Teller", "Tripped", "actor_class"]
