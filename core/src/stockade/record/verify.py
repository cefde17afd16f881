"""``stockade verify``: what holds in the record, counted, and each thing that does not.

Every check is made on every event, and each failure is named, not only the first:

- **links**: each event's ``prev`` is the hash of the event before it (64 zeros for the
  first), its ``hash`` is recomputed from ``prev``, ``seq``, run, step and body
  (:func:`stockade.record.chain.link`), and its ``kind``, ``action_id`` and ``time`` columns say
  what its body says; a missing ``seq`` is named;
- **signatures**: each event's own signature, of its recorded hash, under the key pinned in
  the store's ``meta`` (and that key is the ``signing.key`` beside the store, when one is);
- **the head**: ``store.db.head`` is signed with that key and names an event of the chain,
  with its hash; a head past the last event means the tail was cut;
- **blobs**: every output blob a ``result`` event names is re-hashed, whole, against that
  name (of the whole record, or of one run: the run page).

The limit: whoever holds ``signing.key`` can write a new, consistent history, and a tail
cut together with a head rewritten from the remaining events' own columns looks like a
shorter record (keep :attr:`Verdict.head_hash` elsewhere to tell).
"""

from __future__ import annotations

import json
import os
import sqlite3
from stat import S_ISREG
from typing import TYPE_CHECKING, Any

from attrs import field, frozen

from .blobs import CheckedBlobs
from .chain import CHAIN_FORMAT, GENESIS, head_path, key_path, link, load_key, public_hex
from .integrity import schema_problems, shape_problems
from .outputs import check_outputs
from .store import SCHEMA, Store, unreadable

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

PROBLEMS_LISTED = 50  # a re-signed chain fails at every event; the rest are counted


@frozen
class Problem:
    """One thing in the record that does not hold.

    Attributes:
        text: what is wrong and what differs, in words.
        seq: the event it is about, if one.
        blob: the blob it is about, if one.
    """

    text: str
    seq: int | None = field(kw_only=True, default=None)
    blob: str | None = field(kw_only=True, default=None)


@frozen
class Verdict:
    """What ``stockade verify`` checked and found.

    Attributes:
        ok: every check passed.
        events: events read from the record.
        links: events whose link holds (``prev``, recomputed hash, columns).
        signatures: events whose own signature holds under the pinned key.
        key_file: the pinned key was compared with the ``signing.key`` beside the store
            (``False`` when there is none, e.g. a copied store: only the pinned key is used).
        head_seq: the event the head names (0: no head, or it does not hold).
        head_hash: that event's hash: keep it elsewhere to tell a later tail cut.
        blobs: output blobs the result events name (each re-hashed whole once).
        blobs_held: those whose content still hashes to their name.
        blob_bytes: the bytes re-hashed.
        run_id: the run whose blobs were re-hashed (``None``: every run's).
        run_events: that run's events (0 without ``run_id``).
        problems: what does not hold, in record order (at most :data:`PROBLEMS_LISTED`).
        more: problems found past those listed.
    """

    ok: bool
    events: int
    links: int = field(kw_only=True, default=0)
    signatures: int = field(kw_only=True, default=0)
    key_file: bool = field(kw_only=True, default=False)
    head_seq: int = field(kw_only=True, default=0)
    head_hash: str = field(kw_only=True, default="")
    blobs: int = field(kw_only=True, default=0)
    blobs_held: int = field(kw_only=True, default=0)
    blob_bytes: int = field(kw_only=True, default=0)
    run_id: str | None = field(kw_only=True, default=None)
    run_events: int = field(kw_only=True, default=0)
    problems: tuple[Problem, ...] = field(kw_only=True, default=())
    more: int = field(kw_only=True, default=0)

    @property
    def bad_seq(self) -> int | None:
        """The first event named by a problem (``None``: ok, or none names one)."""
        return next((p.seq for p in self.problems if p.seq is not None), None)

    @property
    def problem(self) -> str:
        """The first problem, in words (empty when ok)."""
        return self.problems[0].text if self.problems else ""

    def checked(self) -> str:
        """Exactly what was checked, in one sentence."""
        key = "the pinned key, which is the signing.key beside the store"
        if not self.key_file:
            key = "the pinned key (no signing.key beside the store to compare it with)"
        parts = [
            f"{self.events} events",
            f"{self.links} of {self.events} links hold (from the first event to the last:"
            " previous hash, recomputed hash, columns)",
            f"{self.signatures} of {self.events} event signatures hold (Ed25519, {key})",
            f"the signed head names event {self.head_seq}"
            if self.head_seq
            else "no signed head holds",
        ]
        scope = "every run's" if self.run_id is None else f"run {self.run_id}'s"
        parts.append(
            f"{self.blobs_held} of {self.blobs} output blobs ({scope}) hold, re-hashed whole"
            f" ({self.blob_bytes} bytes)"
        )
        if self.run_id is not None:
            parts.append(f"run {self.run_id} has {self.run_events} of these events")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The verdict as JSON-ready data (``stockade verify --json``)."""
        return {
            "ok": self.ok,
            "events": self.events,
            "links": self.links,
            "signatures": self.signatures,
            "key_file": self.key_file,
            "head": {"seq": self.head_seq, "hash": self.head_hash} if self.head_seq else None,
            "blobs": self.blobs,
            "blobs_held": self.blobs_held,
            "blob_bytes": self.blob_bytes,
            "run_id": self.run_id,
            "run_events": self.run_events,
            "problems": [{"text": p.text, "seq": p.seq, "blob": p.blob} for p in self.problems],
            "more_problems": self.more,
            "checked": self.checked(),
            # Kept for readers of the first format: the first failure.
            "bad_seq": self.bad_seq,
            "problem": self.problem,
        }


class Checked:
    """What a long-lived reader (the run page) checked before, so that checking again costs
    only what is new: blob files by their identity (:class:`~stockade.record.blobs.CheckedBlobs`),
    and the signatures of the record's first events, by a digest of exactly their ``seq``,
    ``hash`` and ``sig`` columns (a signature is a pure function of those and the key: the
    same bytes verify the same way again)."""

    def __init__(self) -> None:
        import threading

        self.blobs = CheckedBlobs()
        self._signed: tuple[str, int, bytes] = ("", 0, b"")
        self._lock = threading.Lock()

    def signed(self, pinned: str) -> tuple[int, bytes]:
        """How many leading events were found signed under ``pinned``, and their digest."""
        with self._lock:
            key, count, digest = self._signed
        return (count, digest) if key == pinned else (0, b"")

    def remember(self, pinned: str, count: int, digest: bytes) -> None:
        """The first ``count`` events, whose columns digest to ``digest``, are signed."""
        with self._lock:
            self._signed = (pinned, count, digest)


def _columns(row: tuple[Any, ...]) -> bytes:
    """The columns a signature check depends on, for :class:`Checked`'s digest."""
    return f"{row[0]}\n{row[3]}\n".encode() + bytes(row[4])


class _Found:
    """Problems as they are found, listed up to a cap and counted past it."""

    def __init__(self) -> None:
        self.listed: list[Problem] = []
        self.more = 0

    def add(self, text: str, *, seq: int | None = None, blob: str | None = None) -> None:
        if len(self.listed) < PROBLEMS_LISTED:
            self.listed.append(Problem(text, seq=seq, blob=blob))
        else:
            self.more += 1


def verify(  # noqa: PLR0911 - a verdict for each way the record fails before its chain is read
    store: Store, *, run: str | None = None, checked: Checked | None = None
) -> Verdict:
    """Check the whole chain (links, every signature, the pinned key, the head) and re-hash
    every output blob (or only ``run``'s; ``checked`` skips what it saw checked before and
    unchanged since: blob files, leading signatures).

    Raises:
        StoreError: the store cannot be read at all (not a SQLite file, cut short).
    """
    try:
        with store.locked():
            db = store.connection
            pinned_row = db.execute("SELECT value FROM meta WHERE key='pubkey'").fetchone()
            chain_row = db.execute("SELECT value FROM meta WHERE key='chain'").fetchone()
            found = db.execute(
                "SELECT seq, body, prev, hash, sig, run_id, step, action_id, kind, time"
                " FROM events ORDER BY seq"
            ).fetchall()
            damaged = schema_problems(db, SCHEMA)
    except sqlite3.Error as error:
        hint = "the file is damaged or is not a Stockade store; restore it from a copy"
        raise unreadable(store.path, error, hint) from None
    problems = _Found()
    count = len(found)
    for text in damaged:
        problems.add(text)
    shapes = shape_problems(found)
    if shapes:  # their values cannot be read as an event's
        for text in shapes:
            problems.add(text)
        return _verdict(count, problems, run_id=run, run_events=0)
    head = _read_head(store)
    run_events = sum(1 for row in found if row[5] == run) if run is not None else 0
    base: dict[str, Any] = {"run_id": run, "run_events": run_events}
    if not found:
        if head is not None:
            problems.add("the record is empty, but its head names an event", seq=head[0])
        if pinned_row is not None:  # pinned with the first event: there were some
            problems.add("the record holds no events, but its key was pinned by its first")
        key_file = load_key(key_path(store), create=False) is not None
        return _verdict(0, problems, key_file=key_file, **base)
    if pinned_row is None:
        problems.add("the store has events but no pinned key")
        return _verdict(count, problems, **base)
    if chain_row is None or chain_row[0] != CHAIN_FORMAT:
        found_format = "none" if chain_row is None else chain_row[0]
        problems.add(
            f"the record's chain format is {found_format}, and this Stockade checks format "
            f"{CHAIN_FORMAT}"
        )
        return _verdict(count, problems, **base)
    key = load_key(key_path(store), create=False)
    if key is not None and public_hex(key) != pinned_row[0]:
        problems.add("the pinned key is not the store's signing key")
        return _verdict(count, problems, key_file=True, **base)
    public = _public_key(pinned_row[0])
    if public is None:
        problems.add(f"the pinned key {pinned_row[0][:80]!r} is not an Ed25519 public key")
        return _verdict(count, problems, **base)
    links, signatures = _chain(found, public, problems, checked, pinned_row[0])
    head_seq, head_hash = _head(found, head, public, problems)
    memo = checked.blobs if checked is not None else CheckedBlobs()
    blobs, held, size = check_outputs(store, found, run, memo, problems.add)
    return _verdict(
        count,
        problems,
        links=links,
        signatures=signatures,
        key_file=key is not None,
        head_seq=head_seq,
        head_hash=head_hash,
        blobs=blobs,
        blobs_held=held,
        blob_bytes=size,
        **base,
    )


def _verdict(events: int, problems: _Found, **counts: Any) -> Verdict:  # noqa: ANN401
    ok = not problems.listed
    return Verdict(ok, events, problems=tuple(problems.listed), more=problems.more, **counts)


def _public_key(text: str) -> Ed25519PublicKey | None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        return Ed25519PublicKey.from_public_bytes(bytes.fromhex(text))
    except ValueError:
        return None


def _chain(
    found: list[tuple[Any, ...]],
    public: Ed25519PublicKey,
    problems: _Found,
    checked: Checked | None,
    pinned: str,
) -> tuple[int, int]:
    """Every link and every signature; how many of each hold."""
    import hashlib

    trusted = _trusted(found, checked, pinned)
    valid = [True] * trusted + _signatures(found[trusted:], public)
    signed, leading = hashlib.sha256(), 0
    links = signatures = 0
    expected, prev = 1, GENESIS
    for index, row in enumerate(found):
        seq, body, stored_prev, digest, _signature, run_id, step, *copies = row
        if seq < expected:  # only before the first: numbers are unique and sorted
            problems.add(f"event {seq} is out of place: the record's events start at 1", seq=seq)
        elif seq != expected:
            gone = (
                f"event {expected} is missing"
                if seq == expected + 1
                else f"events {expected}..{seq - 1} are missing"
            )
            problems.add(
                f"{gone}: the record goes from event {expected - 1} to event {seq}", seq=expected
            )
        holds = True
        if seq == expected and stored_prev != prev:
            holds = False
            problems.add(
                f"event {seq} does not follow event {seq - 1}: it names {stored_prev[:16]}... as"
                f" the hash before it, and event {seq - 1}'s is {prev[:16]}...",
                seq=seq,
            )
        recomputed = link(stored_prev, seq, body, run_id, step)
        if recomputed != digest:
            holds = False
            problems.add(
                f"event {seq} was changed after it was recorded: its content hashes to"
                f" {recomputed[:16]}..., its recorded hash is {digest[:16]}...",
                seq=seq,
            )
        else:
            differs = _columns_differ(body, copies)
            if differs:
                holds = False
                problems.add(f"event {seq} was changed after it was recorded: {differs}", seq=seq)
        links += holds
        if valid[index]:
            signatures += 1
            if leading == index:
                signed.update(_columns(row))
                leading += 1
        else:
            problems.add(
                f"event {seq} is not signed with the store's key (its signature does not match"
                " its recorded hash)",
                seq=seq,
            )
        expected, prev = seq + 1, digest
    if checked is not None:
        checked.remember(pinned, leading, signed.digest())
    return links, signatures


PARALLEL_FROM = 256  # fewer signatures than this are checked on this thread alone


def _signatures(found: list[tuple[Any, ...]], public: Ed25519PublicKey) -> list[bool]:
    """Whether each event's own signature holds, checked on every core (an Ed25519 check
    releases the GIL), in order."""
    from concurrent.futures import ThreadPoolExecutor

    from cryptography.exceptions import InvalidSignature

    def check(rows: list[tuple[Any, ...]]) -> list[bool]:
        holds = []
        for row in rows:
            try:
                public.verify(bytes(row[4]), bytes.fromhex(row[3]))
                holds.append(True)
            except (InvalidSignature, ValueError, TypeError):
                holds.append(False)
        return holds

    workers = min(os.cpu_count() or 1, 8)
    if workers == 1 or len(found) < PARALLEL_FROM:
        return check(found)
    size = -(-len(found) // workers)
    with ThreadPoolExecutor(workers, thread_name_prefix="stockade-verify") as pool:
        parts = pool.map(check, [found[at : at + size] for at in range(0, len(found), size)])
        return [holds for part in parts for holds in part]


def _trusted(found: list[tuple[Any, ...]], checked: Checked | None, pinned: str) -> int:
    """How many leading events ``checked`` saw signed, if they are still byte for byte the
    same (else 0: check them all)."""
    import hashlib

    trusted, before = checked.signed(pinned) if checked is not None else (0, b"")
    if not trusted or len(found) < trusted:
        return 0
    summed = hashlib.sha256()
    for row in found[:trusted]:
        summed.update(_columns(row))
    return trusted if summed.digest() == before else 0


def _columns_differ(body: str, copies: list[Any]) -> str:
    """How the ``action_id``, ``kind`` and ``time`` columns differ from the body (empty:
    they agree)."""
    try:
        data = json.loads(body)
    except ValueError:
        return "its body is not JSON"
    if not isinstance(data, dict):
        return "its body is not a JSON object"
    for name, column in zip(("action_id", "kind", "time"), copies, strict=True):
        if data.get(name) != column:
            return f"its {name} column says {column!r}, its body says {data.get(name)!r}"
    return ""


def _head(
    found: list[tuple[Any, ...]],
    head: tuple[int, str, str] | None,
    public: Ed25519PublicKey,
    problems: _Found,
) -> tuple[int, str]:
    """The head's checks; the event it names and that event's hash (0, "" when it fails)."""
    from cryptography.exceptions import InvalidSignature

    last = found[-1][0]
    if head is None:
        problems.add("the head file is missing or unreadable")
        return 0, ""
    head_seq, head_hash, head_sig = head
    try:
        public.verify(bytes.fromhex(head_sig), bytes.fromhex(head_hash))
    except (InvalidSignature, ValueError):
        problems.add("the head is not signed with the store's key")
        return 0, ""
    if head_seq > last:
        problems.add(f"the tail was cut: events {last + 1}..{head_seq} are gone", seq=last + 1)
        return 0, ""
    named = next((row for row in found if row[0] == head_seq), None)
    if named is None or named[3] != head_hash:
        problems.add(f"event {head_seq} is not the one the head names", seq=head_seq)
        return 0, ""
    return head_seq, head_hash


def _read_head(store: Store) -> tuple[int, str, str] | None:
    try:  # a fifo is never waited on, nor a device read without end: a file, 512 bytes
        fd = os.open(head_path(store), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            seq, digest, signature = handle.read(
                512 if S_ISREG(os.fstat(fd).st_mode) else 0
            ).split()
        return int(seq), digest.decode(), signature.decode()
    except (OSError, ValueError):
        return None
