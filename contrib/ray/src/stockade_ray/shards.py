"""The sharded record on Ray: one writer actor per shard, anchored in the driver's chain.

A :class:`ShardWriter` is a Ray actor that owns one shard chain (its own store and signing
key, ``shards/NAME/store.db`` beside the driver's store: :mod:`stockade.record.shards`) and
appends the events it is sent in one transaction per batch, in its own process, so the
shards' hashing, signing and inserting run in parallel. A :class:`ShardedRecord` routes each
run's events to one shard (by its run id: an episode's events stay together, in order), and
:meth:`ShardedRecord.anchor` writes each shard's head into the driver's chain as an
``anchor`` event. ``stockade verify`` on the driver's store then checks every shard too.
A writer that starts closes its shard's commands cut off by a killed driver
(:meth:`ShardWriter.opened`), as the main chain's recorder does when it opens.

The writers run on the driver's node, always (:func:`on_this_node`): a shard's store is a
file beside the driver's, where ``stockade verify``, ``log``, ``show`` and an episode's
``steps()`` read it, so a writer placed on another node would write it to that node's disk,
out of their reach. Ray's default placement keeps a writer that claims no CPU on the
driver's node only while that node is not busy.

A batch travels as one :func:`pickle.dumps` of its events (:func:`pack`), not as a list Ray
pickles itself: Ray's pickler (cloudpickle) calls back into Python for every object, and
the events are many small ones. Measured with batches of 64, the driver's CPU an event fell
from about 20 to 11 µs and the writer's from 73 to 61 µs (``docs/scale-out.md``). Only the
driver's own events are unpickled: the writer is the driver's actor, and Ray itself
unpickles whatever the driver sends it.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stockade.record.events import AnchorEvent

if TYPE_CHECKING:
    from stockade.record.chain import Chain
    from stockade.record.events import Event


def pack(events: Sequence[Event]) -> bytes:
    """A batch of events as :meth:`ShardWriter.append` takes it."""
    return pickle.dumps(list(events), protocol=pickle.HIGHEST_PROTOCOL)


class ShardWriter:
    """One shard chain, appended in this actor's process."""

    def __init__(self, path: str, redact: Sequence[str] = ()) -> None:
        from stockade.record.chain import Chain
        from stockade.record.store import Store

        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        self.store = Store(path)
        self.chain = Chain(self.store, redact)  # the main chain's redaction

    def opened(self) -> int:
        """Close the record of every command of this shard whose process went away (a
        writer killed with its driver mid-step; :meth:`Chain.close_orphans`), as the main
        chain's recorder does when it opens; how many were closed."""
        return len(self.chain.close_orphans())

    def append(self, batch: bytes) -> int:
        """Append the events packed in ``batch`` (:func:`pack`) in one transaction; how
        many."""
        events: list[Event] = pickle.loads(batch)  # noqa: S301 - the driver's own events
        self.chain.append_many(events)
        return len(events)

    def node(self) -> str:
        """The Ray node this writer runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def head(self) -> tuple[int, str, str]:
        """The shard's last ``seq``, its hash, and the shard's public key (its signing key's,
        before its first event pins it)."""
        from stockade.record.shards import head_of

        seq, digest, key = head_of(self.store)
        return seq, digest, key or self.chain.public

    def close(self) -> None:
        self.chain.close()
        self.store.close()


def on_this_node(placement: dict[str, Any] | None) -> dict[str, Any]:
    """Ray actor options for a shard writer: ``placement`` (by default, no CPU claimed)
    kept to this process's node (a hard node affinity).

    Raises:
        UsageError: ``placement`` names a scheduling strategy of its own, or more of a
            resource (CPUs, GPUs, memory, a custom one) than this node has at all.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from stockade.errors import UsageError

    options = dict(placement or {"num_cpus": 0})
    if "scheduling_strategy" in options:
        raise UsageError(
            "a shard writer's placement cannot choose its node: it writes its shard beside "
            "the driver's store, so it runs on the driver's node",
            hint="leave scheduling_strategy out of the shard writers' placement",
        )
    node = ray.get_runtime_context().get_node_id()
    nodes: list[dict[str, Any]] = ray.nodes()
    here: dict[str, float] = next(
        (n.get("Resources", {}) for n in nodes if n.get("NodeID") == node), {}
    )
    asked = {
        "CPU": options.get("num_cpus") or 0,
        "GPU": options.get("num_gpus") or 0,
        "memory": options.get("memory") or 0,
        **(options.get("resources") or {}),
    }
    short = sorted(name for name, amount in asked.items() if amount > here.get(name, 0))
    if short:
        raise UsageError(
            f"the shard writers run on the driver's node, which has not {', '.join(short)} "
            f"as the placement asks ({', '.join(f'{n}: {asked[n]}' for n in short)})",
            hint="ask the shard writers' placement for what the driver's node has",
        )
    options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
    return options


class ShardedRecord:
    """``count`` shard writers for the record whose main chain is ``main``.

    Args:
        main: the driver's chain (its store names where the shards live).
        count: how many shards (``s0`` ... ``s{count-1}``).
        placement: Ray actor options for the writers (one CPU-light process each), kept to
            the driver's node (:func:`on_this_node`).
        redact: the patterns the shards redact (the main store's ``store.redact``).
    """

    def __init__(
        self,
        main: Chain,
        count: int,
        placement: dict[str, Any] | None = None,
        redact: Sequence[str] = (),
    ) -> None:
        import ray

        from stockade.record.shards import shard_path

        self.main = main
        self.names = [f"s{i}" for i in range(count)]
        writer = ray.remote(ShardWriter).options(**on_this_node(placement))
        self.writers = [writer.remote(shard_path(main.store, n), redact) for n in self.names]
        # A shard's commands cut off by a killed driver (their writer went with it) are
        # closed before anything new is appended; then every shard is anchored at once, an
        # empty one at event 0: from here on the main chain names it, and a shard deleted
        # before its next anchor (a pool killed within its first second) is missed.
        ray.get([w.opened.remote() for w in self.writers])
        self.anchor(every=True)

    def shard_of(self, run_id: str) -> int:
        """The shard a run's events go to (always the same one)."""
        return int(hashlib.sha256(run_id.encode()).hexdigest()[:8], 16) % len(self.writers)

    def send(self, batches: dict[int, list[Event]]) -> list[Any]:
        """Send each shard its batch; the Ray references of their appends."""
        writers = self.writers
        return [writers[i].append.remote(pack(events)) for i, events in batches.items() if events]

    def append(self, events: Sequence[Event], run_id: str) -> None:
        """Append a run's events to its shard and wait until they are stored."""
        import ray

        ray.get(self.send({self.shard_of(run_id): list(events)}))

    def anchor(self, *, every: bool = False) -> list[AnchorEvent]:
        """Each shard's head, appended to the main chain as an ``anchor`` event (``every``:
        an empty shard's too, at event 0)."""
        import ray

        heads = ray.get([w.head.remote() for w in self.writers])
        anchors = [
            AnchorEvent(f"anchor-{name}-{seq}", shard=name, seq=seq, hash=digest, public_key=key)
            for name, (seq, digest, key) in zip(self.names, heads, strict=True)
            if seq or every
        ]
        if anchors:
            self.main.append_many(anchors)
        return anchors

    def close(self) -> None:
        import ray

        ray.get([w.close.remote() for w in self.writers])
        for writer in self.writers:
            ray.kill(writer)
