"""The sharded record: chains of their own (a node's, an episode's) anchored in the main one.

One chain appends one event at a time (each link hashes the one before), so at cluster
scale the record is sharded: each shard is a chain of its own, in its own store with its own
signing key (``shards/NAME/store.db`` beside the main store), appended by its own process,
and the main chain holds, now and then, an ``anchor`` event for it: the shard's last
``seq``, that event's hash, and the shard's public key.

Verifying (``stockade verify``) is then: verify the main chain; for each shard it anchors,
verify the shard's chain as any chain is verified, check that its pinned key is the
anchored one, and that the event each anchor names still has the anchored hash. A shard
cut, rewritten or re-signed after an anchor no longer reaches it; a shard folder no anchor
names is reported, and so is a shard that cannot be read, each on its own. Events after a
shard's last anchor are only as safe as its head file, which anyone who can write the store
can rebuild from the remaining events' own columns (as for a single chain's tail: keep the
last anchored hash elsewhere to tell). A shard's name is a plain word (:data:`NAME`): an
anchor naming ``../x`` or ``/x`` names no shard, and nothing is opened for it.

``show``, ``log`` and ``replay`` read the main chain and the shards its anchors name
(:func:`all_rows`): a folder no anchor names is not part of the record.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from typing import TYPE_CHECKING, Any

from attrs import frozen

from .store import Store

if TYPE_CHECKING:
    from .chain import Row
    from .verify import Verdict

SHARDS = "shards"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
"""A shard's name: a plain word (``s0``, ``node-3``), never a path."""
BAD = "\0"
"""Before the ``repr`` of an anchor's name that is no shard's: no folder's name holds it."""


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


def anchors(store: Store) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    """The anchor events of the main chain in ``store``, by the shard they name (each with
    its own ``seq``), in order; names that are no shard's (:data:`NAME`) under :data:`BAD`
    and their ``repr``, so that they are reported, never opened."""
    found: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    with store.locked():
        marked = store.connection.execute(
            # NOT INDEXED: an index is not signed, and one rebuilt by hand could hide an
            # anchor (and with it a shard) from the query while the chain still verifies
            "SELECT seq, body FROM events NOT INDEXED WHERE kind='anchor' ORDER BY seq"
        ).fetchall()
    for seq, text in marked:
        try:  # (a body that is not JSON is the main chain's own verdict to report)
            body = json.loads(text)
        except (TypeError, ValueError):
            body = None
        name = body.get("shard") if isinstance(body, dict) else None
        key = name if isinstance(name, str) and NAME.match(name) else BAD + repr(name)
        found.setdefault(key, []).append((seq, body if isinstance(body, dict) else {}))
    return found


def all_rows(store: Store, run_id: str | None = None) -> list[tuple[Row, Store]]:
    """The events of the record in ``store`` and of every shard its anchors name (of one
    run or of all), each with the store that holds it, in the order they were recorded (by
    time; a chain's own order among equal times). The shards' stores are the caller's to
    close (each row names its own; ``store`` is among them)."""
    from .chain import rows

    found = [(row, store) for row in rows(store, run_id)]
    for name in sorted(n for n in anchors(store) if NAME.match(n)):
        if os.path.isfile(shard_path(store, name)):
            shard = Store(shard_path(store, name), read_only=True)
            found += [(row, shard) for row in rows(shard, run_id)]
    found.sort(key=lambda pair: pair[0].time)  # stable: each chain keeps its order
    return found


def verify_shards(store: Store) -> list[ShardCheck]:
    """Every shard of the record in ``store``: the ones its anchors name, and any other
    folder under ``shards/`` (reported as anchored by none)."""
    named = anchors(store)
    folder = os.path.join(os.path.dirname(store.path), SHARDS)
    names = set(named) | (set(os.listdir(folder)) if os.path.isdir(folder) else set())
    return [_guarded(store, name, named.get(name, [])) for name in sorted(names)]


def _guarded(store: Store, name: str, marks: list[tuple[int, dict[str, Any]]]) -> ShardCheck:
    """:func:`_check`, with whatever keeps a shard from being read reported as its own
    problem: one bad shard never hides the others or the main chain's verdict."""
    from .store import StoreError

    if not NAME.match(name):  # an anchor's (already its repr, after BAD), or a folder's
        shown = name.removeprefix(BAD) if name.startswith(BAD) else repr(name)
        what = "an anchor names" if marks else "a folder under shards/ is"
        return ShardCheck(shown, None, 0, 0, (f"{what} {shown}, which is no shard's name",))
    try:
        return _check(store, name, marks)
    except (StoreError, sqlite3.Error, OSError, ValueError) as error:
        text = error.message if isinstance(error, StoreError) else str(error)
        return ShardCheck(name, None, 0, 0, (f"shard {name} cannot be read: {text}",))


def _check(store: Store, name: str, marks: list[tuple[int, dict[str, Any]]]) -> ShardCheck:
    from .verify import verify

    path = shard_path(store, name)
    last = _seq(marks[-1][1]) if marks else 0
    if not os.path.isfile(path):
        missing = f"shard {name}'s store {path} is missing"
        return ShardCheck(name, None, last, 0, (missing,))
    shard = Store(path, read_only=True)
    try:
        verdict = verify(shard)
        problems = [f"shard {name}: {p.text}" for p in verdict.problems]
        top, _, key = head_of(shard)
        if not marks:
            problems.append(f"shard {name} is anchored by no event of the main chain")
            return ShardCheck(name, verdict, 0, top, tuple(problems))
        for at, anchor in marks:  # every anchor, not only the last: none may be undone
            problems += _held(shard, name, at, anchor, key)
        return ShardCheck(name, verdict, last, max(0, top - last), tuple(dict.fromkeys(problems)))
    finally:
        shard.close()


def _seq(anchor: dict[str, Any]) -> int:
    seq = anchor.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else -1


def _held(shard: Store, name: str, at: int, anchor: dict[str, Any], key: str) -> list[str]:
    """What does not hold of the anchor at main event ``at`` for shard ``name``."""
    seq, digest = _seq(anchor), anchor.get("hash")
    if seq < 0 or not isinstance(digest, str) or not isinstance(anchor.get("public_key"), str):
        return [f"the anchor at main event {at} for shard {name} is malformed"]
    problems = []
    if key != anchor["public_key"] and (key or seq):  # (no key is pinned before event 1)
        problems.append(f"shard {name} is signed with another key than the one anchored")
    if seq == 0:  # anchored when it opened, before its first event: it must be there
        return problems
    with shard.locked():
        found = shard.connection.execute("SELECT hash FROM events WHERE seq=?", (seq,)).fetchone()
    if found is None:
        problems.append(f"shard {name} was cut: its anchored event {seq} is gone")
    elif found[0] != digest:
        problems.append(f"shard {name} was rewritten: event {seq} is not the one anchored")
    return problems
