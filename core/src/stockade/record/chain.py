"""The record: every event appended to one hash chain, each link signed, and its check.

Each event becomes a row of the store's ``events`` table:

- ``body``: the event as canonical JSON (sorted keys, no spaces); a result's output text
  is not in it: each stream's content (the whole stream, from the spill file when it was
  cut or is not UTF-8) is a blob under ``blobs/`` beside the store, named by its sha256,
  and the body holds that name;
- ``hash`` = sha256 of ``prev``, ``seq``, ``run_id``, ``step`` and ``body`` (one per line),
  where ``prev`` is the hash of the event before (64 zeros for the first): an edit, a
  deletion or a reordering breaks every link after it. The other columns (``kind``,
  ``action_id``, ``time``) are copies of the body's fields, checked against it;
- ``sig``: an Ed25519 signature of ``hash`` with the store's key (``signing.key`` beside the
  store, owner-only, made on first use). Its public key is pinned in the store's ``meta``
  at the first event, so a chain re-signed with another key does not verify;
- after each append, the head (the last ``seq``, ``hash`` and ``sig``) is written to
  ``store.db.head``: a tail cut from the table no longer reaches it.

Checking (:mod:`stockade.record.verify`) recomputes every link, checks every event's own
signature against the pinned key and the head against the chain, and re-hashes every output
blob the result events name; it names each failure. ``show``, ``replay`` and the run page
read a blob only through :func:`open_blob`, which refuses one whose content does not match
its name.

What this cannot catch: someone who holds the signing key can write a new, consistent
history. The key is the owner's; sandboxed commands never see the state directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import stat
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from attrs import frozen

from .blobs import put_blob, put_blob_file
from .live import track
from .store import Store, StoreError, unreadable

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    from .events import Event

GENESIS = "0" * 64
CHAIN_FORMAT = "1"
"""How links are hashed (:func:`link`) and bodies written; pinned in ``meta`` beside the
key, so a store written another way is reported as such, not as tampered."""


def canonical(data: object) -> str:
    """The one JSON text for ``data``: what is hashed and signed. A lone surrogate (a name
    or argument that is not UTF-8, as Python decodes one) is written as its ``\\u`` escape,
    which JSON reads back as the same string: the text is always UTF-8 (an argument
    ``$'\\xff'`` made the record fail, and with it the command)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:
        return _LONE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
    return text


_LONE = re.compile("[\ud800-\udfff]")


def link(prev: str, seq: int, body: str, run_id: str = "", step: int = 0) -> str:
    """The hash of an event: it binds the one before, its position, its step and its body."""
    return hashlib.sha256(f"{prev}\n{seq}\n{run_id}\n{step}\n{body}".encode()).hexdigest()


# --- the signing key -------------------------------------------------------------------------


def key_path(store: Store) -> str:
    """The signing key's file, beside the store."""
    return os.path.join(os.path.dirname(store.path) or ".", "signing.key")


def head_path(store: Store) -> str:
    """The head's file, beside the store."""
    return store.path + ".head"


def load_key(path: str, *, create: bool) -> Ed25519PrivateKey | None:
    """The private key in ``path`` (32 raw bytes, owner-only); made when ``create``.

    Raises:
        StoreError: the file is readable by others, or is not a key.
    """
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:  # never a fifo to wait on (O_NONBLOCK), never through a link
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        if not create:
            return None
        key = Ed25519PrivateKey.generate()
        raw = key.private_bytes_raw()
        temp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"  # two hosts' threads race
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
        try:
            os.link(temp, path)  # first writer wins; a racing one reads the winner's key
        except FileExistsError:
            pass
        finally:
            os.unlink(temp)
        return load_key(path, create=False)
    except OSError as error:
        raise StoreError(f"the signing key {path} cannot be read: {error.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # (a folder: opening it as a file would raise)
        os.close(fd)
        raise StoreError(f"the signing key {path} is not a file")
    with os.fdopen(fd, "rb") as handle:
        if info.st_mode & 0o077 or info.st_uid != os.getuid():
            raise StoreError(
                f"the signing key {path} is readable by others or not yours",
                hint=f"chmod 600 {path} (and check who wrote it)",
            )
        raw = handle.read(64)
    if len(raw) != 32:  # an Ed25519 private key is 32 bytes
        raise StoreError(f"{path} is not an Ed25519 key ({len(raw)} bytes)")
    return Ed25519PrivateKey.from_private_bytes(raw)


def public_hex(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """The raw public key of ``key``, in hex (what the store pins)."""
    public = key.public_key() if hasattr(key, "public_key") else key
    return public.public_bytes_raw().hex()


# --- appending ------------------------------------------------------------------------------


class Redactor:
    """Keeps what the ``store.redact`` patterns match out of the record."""

    def __init__(self, patterns: Sequence[str]) -> None:
        import re

        joined = "|".join(f"(?:{p})" for p in patterns)
        self._text = re.compile(joined) if patterns else None
        self._bytes = re.compile(joined.encode()) if patterns else None

    def __bool__(self) -> bool:
        return self._text is not None

    def text(self, value: str) -> str:
        """``value`` with every match replaced."""
        return self._text.sub("[redacted]", value) if self._text is not None else value

    def line(self, value: bytes) -> bytes:
        """One line of output with every match replaced."""
        return self._bytes.sub(b"[redacted]", value) if self._bytes is not None else value


class Chain:
    """Appends events to a store's chain. One per store connection."""

    def __init__(
        self, store: Store, redact: Sequence[str] = (), carrier: str | None = None
    ) -> None:
        self.store = store
        self.carrier = carrier  # who records a command's end (live.track); None: this process
        self.redactor = Redactor(redact)
        key = load_key(key_path(store), create=True)
        assert key is not None  # noqa: S101 - create=True always gives one
        self.key = key
        self.public = public_hex(key)
        self._steps: dict[str, tuple[str, int]] = {}
        self._head_fd: int | None = None
        self._pinned = False

    def append(self, event: Event) -> int:
        """Add ``event`` at the end of the chain; its sequence number.

        Raises:
            StoreError: it could not be written (nothing is half-written).
        """
        return self.append_many((event,))[-1]

    def close_orphans(self) -> list[int]:
        """Close the record of every started command whose process went away (killed
        mid-command): an ``error`` event of code ``aborted`` that says why
        (:mod:`stockade.record.live`). Their sequence numbers.

        Raises:
            StoreError: they could not be written (then none of them is).
        """
        from . import live
        from .events import ErrorEvent

        with self.store.locked():
            found = live.orphans(self.store.connection)
        closing = [ErrorEvent(action_id, live.ABORTED, message=why) for action_id, why in found]
        return self.append_many(closing, still_live=True)

    def append_many(self, events: Sequence[Event], *, still_live: bool = False) -> list[int]:
        """Add ``events`` at the end of the chain, in order, in one transaction (one lock,
        one commit, one head write): each is linked and signed as :meth:`append` would.
        Their sequence numbers. With ``still_live``, an event whose command is no longer
        in the ``live`` table when the transaction starts is left out (another process
        closed it first).

        Raises:
            StoreError: they could not be written (then none of them is).
        """
        if not events:
            return []
        staged = []
        for event in events:
            run_id, step = self._step_of(event)
            if event.kind in ("result", "error", "decline"):
                self._steps.pop(event.action_id, None)  # its last event: the cache stays small
            staged.append((event, run_id, step, canonical(self._body(event))))
        db = self.store.connection
        seqs: list[int] = []
        try:
            with self.store.locked():
                db.execute("BEGIN IMMEDIATE")
                try:
                    if not self._pinned:
                        self._pin(db)
                    last = db.execute(
                        "SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1"
                    ).fetchone()
                    seq, prev = (last[0], last[1]) if last else (0, GENESIS)
                    if still_live:
                        staged = [s for s in staged if _live(db, s[0].action_id)]
                    for event, run_id, step, body in staged:
                        track(db, event, self.carrier)
                        seq += 1
                        digest = link(prev, seq, body, run_id, step)
                        signature = self.key.sign(bytes.fromhex(digest))
                        db.execute(
                            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (
                                seq,
                                run_id,
                                step,
                                event.action_id,
                                event.kind,
                                event.time,
                                body,
                                prev,
                                digest,
                                signature,
                            ),
                        )
                        seqs.append(seq)
                        prev = digest
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    self._pinned = False  # a pin in the rolled-back transaction is gone too
                    raise
                if seqs:
                    self._write_head(seq, prev, signature)
        except sqlite3.Error as error:
            raise StoreError(
                f"cannot record the {staged[0][0].kind} event in {self.store.path}: {error}",
                hint="check the store's storage (disk full? permissions?)",
            ) from None
        except OSError as error:
            raise StoreError(
                f"cannot record the {staged[0][0].kind} event: {error}",
                hint="check the store's storage (disk full? permissions?)",
            ) from None
        return seqs

    def _pin(self, db: sqlite3.Connection) -> None:
        """Pin this key in the store at its first event; refuse a store pinned to another."""
        pinned = db.execute("SELECT value FROM meta WHERE key='pubkey'").fetchone()
        if pinned is None:
            db.execute("INSERT INTO meta VALUES ('pubkey', ?)", (self.public,))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('chain', ?)", (CHAIN_FORMAT,))
        elif pinned[0] != self.public:
            raise StoreError(
                "the signing key beside the store is not the key its record was signed with",
                hint="restore the original signing.key; run `stockade verify`",
            )
        self._pinned = True

    def _step_of(self, event: Event) -> tuple[str, int]:
        if event.kind in ("taint", "annotation"):  # no action of its own: it names its run
            return event.run_id, event.step
        if event.kind == "anchor":
            return "", 0
        if event.kind == "action":
            self._steps[event.action_id] = (event.run_id, event.step)
        found = self._steps.get(event.action_id)
        if found is None:  # an action recorded by another process (a resumed step)
            with self.store.locked():
                row = self.store.connection.execute(
                    "SELECT run_id, step FROM events WHERE action_id=? AND kind='action'",
                    (event.action_id,),
                ).fetchone()
            found = (row[0], row[1]) if row else ("", 0)
            self._steps[event.action_id] = found
        return found

    def _body(self, event: Event) -> dict[str, Any]:
        from ..request.wire import plain

        body: dict[str, Any] = plain(event)
        redactor = self.redactor
        if redactor:
            for holder in (body, body.get("result") or {}):
                if "argv" in holder:
                    holder["argv"] = [redactor.text(arg) for arg in holder["argv"]]
            for key in ("cwd", "message", "detail"):
                if key in body:
                    body[key] = redactor.text(body[key])
        if event.kind == "result":
            result = event.result
            line = redactor.line if redactor else None
            for name, output in (("stdout", result.stdout), ("stderr", result.stderr)):
                stream = body["result"][name]
                text = stream.pop("text")
                if output.spill_path and os.path.exists(output.spill_path):  # the bytes
                    stream["blob"] = put_blob_file(self.store, output.spill_path, line)
                else:
                    content = text.encode("utf-8", "surrogateescape")
                    if line is not None:
                        content = b"".join(line(part) for part in content.splitlines(keepends=True))
                    stream["blob"] = put_blob(self.store, content) if content else None
        return body

    def _write_head(self, seq: int, digest: str, signature: bytes) -> None:
        # One write of one fixed-size line at offset 0, over the last: a rename per event
        # costs milliseconds on some file systems. A killed process never leaves half a
        # write(); only a power cut could, and verify then reports the head, not the chain.
        if self._head_fd is None:
            self._head_fd = os.open(
                head_path(self.store), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600
            )
        # The event's own signature (of its hash) vouches for the head too.
        os.pwrite(self._head_fd, f"{seq:020d} {digest} {signature.hex()}\n".encode(), 0)

    def close(self) -> None:
        """Close the head file and the store."""
        if self._head_fd is not None:
            os.close(self._head_fd)
            self._head_fd = None
        self.store.close()


def _live(db: sqlite3.Connection, action_id: str) -> bool:
    return db.execute("SELECT 1 FROM live WHERE action_id=?", (action_id,)).fetchone() is not None


# --- reading and verifying ----------------------------------------------------------------


@frozen
class Row:
    """One recorded event as the store keeps it."""

    seq: int
    run_id: str
    step: int
    action_id: str
    kind: str
    time: float
    body: dict[str, Any]


def rows(store: Store, run_id: str | None = None) -> Iterator[Row]:
    """The recorded events in order, of one run or of all. A store opened read-only (the
    record's readers) is read past its indexes (``NOT INDEXED``): an index is not signed,
    and one rebuilt by hand could answer a run's events with another's.

    Raises:
        StoreError: the events cannot be read, or one is not shaped as recorded.
    """
    query = "SELECT seq, run_id, step, action_id, kind, time, body FROM events"
    query += " NOT INDEXED" if store.read_only else ""
    args: tuple[object, ...] = ()
    if run_id is not None:
        query += " WHERE run_id=?"
        args = (run_id,)
    try:
        with store.locked():
            found = store.connection.execute(query + " ORDER BY seq", args).fetchall()
    except sqlite3.Error as error:
        hint = "the file is damaged or is not a Stockade store; `stockade verify` says more"
        raise unreadable(store.path, error, hint) from None
    for seq, run, step, action, kind, time, text in found:
        body = _body(text)
        if body is None or not isinstance(seq, int):
            raise StoreError(
                f"event {seq!r} of the record in {store.path} is not shaped as Stockade"
                " records it: it was changed",
                hint="`stockade verify` names what was changed",
                details={"path": store.path, "seq": repr(seq)},
            )
        yield Row(seq, run, step, action, kind, time, body)


def _body(text: object) -> dict[str, Any] | None:
    """An event's body, or ``None`` when it is no JSON object."""
    try:
        body = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return body if isinstance(body, dict) else None
