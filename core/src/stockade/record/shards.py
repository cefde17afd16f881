"""The sharded record: chains of their own (a node's, an episode's) anchored in the main one.

One chain appends one event at a time (each link hashes the one before), so at cluster
scale the record is sharded: each shard is a chain of its own, in its own store with its own
signing key (``shards/NAME/store.db`` beside the main store), appended by its own process,
and the main chain holds, now and then, an ``anchor`` event for it: the shard's last
``seq``, that event's hash, and the shard's public key.

Verifying (``stockade verify``) is then: verify the main chain; for each shard it anchors,
verify the shard's chain as any chain is verified, check that its pinned key is the
anchored one, and that the event the last anchor names still has the anchored hash. A shard
cut, rewritten or re-signed after an anchor no longer reaches it; a shard folder no anchor
names is reported. Events after a shard's last anchor are only as safe as the shard's key
(the same holds for a single chain's tail and its head file).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from attrs import frozen

from .store import Store

if TYPE_CHECKING:
    from .chain import Row
    from .verify import Verdict

SHARDS = "shards"


def shard_path(store: Store, name: str) -> str:
    """Where shard ``name`` of the record in ``store`` keeps its events."""
    return os.path.join(os.path.dirname(store.path), SHARDS, name, "store.db")


def head_of(store: Store) -> tuple[int, str, str]:
    """A chain's last event (``seq``, ``hash``) and its pinned public key; ``(0, "", "")``
    when it has none."""
    with store.locked():
        db = store.connection
        row = db.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        key = db.execute("SELECT value FROM meta WHERE key='pubkey'").fetchone()
    if row is None:
        return 0, "", ""
    return int(row[0]), str(row[1]), str(key[0]) if key else ""


@frozen
class ShardCheck:
    """What was checked of one shard.

    Attributes:
        name: the shard.
        verdict: its own chain's verdict (``None`` when its store is missing).
        anchored: the ``seq`` its last anchor names (0: no anchor names it).
        after: its events after that anchor (only as safe as its key).
        problems: what does not hold, in words.
    """

    name: str
    verdict: Verdict | None
    anchored: int
    after: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def checked(self) -> str:
        """What was checked, in one sentence."""
        own = self.verdict.checked() if self.verdict is not None else "its store is missing"
        return (
            f"shard {self.name}: anchored at event {self.anchored}"
            f" ({self.after} events after it); {own}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "anchored": self.anchored,
            "after": self.after,
            "problems": list(self.problems),
            "verdict": self.verdict.to_dict() if self.verdict is not None else None,
        }


def shard_names(store: Store) -> list[str]:
    """The shards beside ``store`` that hold a store of their own, by name."""
    folder = os.path.join(os.path.dirname(store.path), SHARDS)
    if not os.path.isdir(folder):
        return []
    return sorted(n for n in os.listdir(folder) if os.path.isfile(shard_path(store, n)))


def all_rows(store: Store, run_id: str | None = None) -> list[tuple[Row, Store]]:
    """The events of the record in ``store`` and of every shard beside it (of one run or of
    all), each with the store that holds it, in the order they were recorded (by time; a
    chain's own order among equal times). The shards' stores are the caller's to close
    (each row names its own; ``store`` is among them)."""
    from .chain import rows

    found = [(row, store) for row in rows(store, run_id)]
    for name in shard_names(store):
        shard = Store(shard_path(store, name))
        found += [(row, shard) for row in rows(shard, run_id)]
    found.sort(key=lambda pair: pair[0].time)  # stable: each chain keeps its order
    return found


def verify_shards(store: Store) -> list[ShardCheck]:
    """Every shard of the record in ``store``: the ones its anchors name, and any other
    folder under ``shards/`` (reported as anchored by none)."""
    from .chain import rows

    last: dict[str, dict[str, Any]] = {}
    for row in rows(store):
        if row.kind == "anchor":
            last[row.body["shard"]] = row.body
    folder = os.path.join(os.path.dirname(store.path), SHARDS)
    names = set(last) | (set(os.listdir(folder)) if os.path.isdir(folder) else set())
    return [_check(store, name, last.get(name)) for name in sorted(names)]


def _check(store: Store, name: str, anchor: dict[str, Any] | None) -> ShardCheck:
    from .verify import verify

    path = shard_path(store, name)
    if not os.path.exists(path):
        return ShardCheck(name, None, 0, 0, (f"shard {name}'s store {path} is missing",))
    shard = Store(path)
    try:
        verdict = verify(shard)
        problems = [f"shard {name}: {p.text}" for p in verdict.problems]
        top, _, key = head_of(shard)
        if anchor is None:
            problems.append(f"shard {name} is anchored by no event of the main chain")
            return ShardCheck(name, verdict, 0, top, tuple(problems))
        seq = int(anchor["seq"])
        with shard.locked():
            found = shard.connection.execute(
                "SELECT hash FROM events WHERE seq=?", (seq,)
            ).fetchone()
        if key != anchor["public_key"]:
            problems.append(f"shard {name} is signed with another key than the one anchored")
        if found is None:
            problems.append(f"shard {name} was cut: its anchored event {seq} is gone")
        elif found[0] != anchor["hash"]:
            problems.append(f"shard {name} was rewritten: event {seq} is not the one anchored")
        return ShardCheck(name, verdict, seq, max(0, top - seq), tuple(problems))
    finally:
        shard.close()
