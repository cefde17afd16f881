"""The embedded store: one SQLite file (WAL) under the XDG state directory, owner-only.

It holds the record (``events``: every event of every run, hash-chained and signed by
:mod:`stockade.record.chain`; output blobs sit beside the file, by content address) and the
steps that wait for a person: each held step is kept with the exact spec that was shown,
so that approving it runs exactly that. A step moves ``held`` -> ``approved`` or
``declined`` (a person's answer), then ``approved`` -> ``running`` -> ``done`` / ``failed``
when a process claims it. Each move is one conditional ``UPDATE``, so two processes cannot
both answer, or both run, the same step.

The schema carries a version in ``meta``; :func:`open_store` creates or migrates it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import threading
import time
from typing import Literal

from attrs import field, frozen

from ..config.schema import Config, store_folder
from ..errors import StockadeError, UsageError
from ..request.result import PendingApproval
from ..request.spec import ExecSpec
from ..request.verdict import Classification, Decision

SCHEMA_VERSION = 2
StepState = Literal["held", "approved", "declined", "running", "done", "failed"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS held (
    run_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    state TEXT NOT NULL,
    created REAL NOT NULL,
    spec TEXT NOT NULL,
    stdin BLOB NOT NULL,
    classification TEXT NOT NULL,
    decision TEXT NOT NULL,
    answered_by TEXT,
    answered_at REAL,
    outcome TEXT,
    PRIMARY KEY (run_id, step)
);
CREATE INDEX IF NOT EXISTS held_state ON held (state);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    action_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    time REAL NOT NULL,
    body TEXT NOT NULL,
    prev TEXT NOT NULL,
    hash TEXT NOT NULL,
    sig BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS events_step ON events (run_id, step);
CREATE INDEX IF NOT EXISTS events_action ON events (action_id);
CREATE TABLE IF NOT EXISTS live (action_id TEXT PRIMARY KEY, owner TEXT NOT NULL);
"""


_COLUMNS = (
    "run_id, step, state, created, spec, stdin, classification, decision, answered_by,"
    " answered_at, outcome"
)


class StoreError(StockadeError):
    """The store cannot be opened or written."""

    code = "store"


def unreadable(path: str, error: sqlite3.Error, hint: str) -> StoreError:
    """The error for the record in ``path`` that a query could not read."""
    return StoreError(
        f"cannot read the record in {path}: {error}", hint=hint, details={"path": path}
    )


@frozen
class HeldStep:
    """A step that waited for a person, as the store keeps it.

    Attributes:
        run_id: the run it belongs to.
        step: its number in the run.
        state: ``held``, ``approved``, ``declined``, ``running``, ``done`` or ``failed``.
        created: when it was held (seconds since the epoch).
        spec: exactly what would run.
        classification: what it may affect, as shown.
        decision: the ``ask`` decision that held it.
        answered_by: who approved or declined it.
        answered_at: when.
        outcome: the result (or the error) as JSON once it ran.
    """

    run_id: str
    step: int
    state: StepState = field(kw_only=True)
    created: float = field(kw_only=True)
    spec: ExecSpec = field(kw_only=True)
    classification: Classification = field(kw_only=True)
    decision: Decision = field(kw_only=True)
    answered_by: str | None = field(kw_only=True, default=None)
    answered_at: float | None = field(kw_only=True, default=None)
    outcome: str | None = field(kw_only=True, default=None)


def store_path(config: Config) -> str:
    """The store's file: ``store.path`` from the config, else ``store.db`` in
    :func:`~stockade.config.schema.store_folder`."""
    if config.store.path:
        return os.path.expanduser(config.store.path)
    return os.path.join(store_folder(config), "store.db")


class Store:
    """A connection to the store. Use :func:`open_store`."""

    def __init__(self, path: str, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only  # its readers trust no index (:func:`~.chain.rows`)
        self._lock = threading.Lock()
        if read_only:
            self._db = _read_only(path)
            return
        directory = os.path.dirname(path) or "."
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            if not os.path.exists(path):
                # Made owner-only before SQLite opens it. Never open and close the file
                # once it exists: closing any descriptor of it drops every POSIX lock this
                # process holds on it, and another connection's WAL would be torn down.
                with contextlib.suppress(FileExistsError):
                    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
            # One connection per host, used from its threads (run_async admits in a worker):
            # every use holds the lock.
            self._db = sqlite3.connect(
                path, timeout=OPEN_TIMEOUT, isolation_level=None, check_same_thread=False
            )
            _write_ahead(self._db)
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except (OSError, sqlite3.Error) as error:
            raise StoreError(
                f"cannot open the store {path}: {error}",
                hint="check the file's permissions, or set store.path in the config",
                details={"path": path},
            ) from None

    def _migrate(self) -> None:
        with self._db:
            self._db.executescript(SCHEMA)
            row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is not None and int(row[0]) > SCHEMA_VERSION:
                raise sqlite3.DatabaseError(
                    f"its schema is version {row[0]}, newer than this Stockade knows"
                    f" ({SCHEMA_VERSION}); upgrade Stockade"
                )
            # Version 1 had only held steps; the script above added the record's tables.
            self._db.execute(
                "INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
            )

    @property
    def connection(self) -> sqlite3.Connection:
        """The connection; use it only while holding :meth:`locked`."""
        return self._db

    def locked(self) -> threading.Lock:
        """The lock every use of :attr:`connection` holds (``with store.locked(): ...``)."""
        return self._lock

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    # --- held steps ----------------------------------------------------------------------

    def hold(self, pending: PendingApproval) -> HeldStep:
        """Keep ``pending`` as a held step, exactly as it would run."""
        from ..request.wire import to_json

        spec = pending.spec
        row = (
            spec.run_id,
            spec.step,
            time.time(),
            to_json(_without_stdin(spec)),
            spec.stdin,
            to_json(pending.classification),
            to_json(pending.decision),
        )
        try:
            with self._lock:
                self._db.execute(
                    "INSERT INTO held (run_id, step, state, created, spec, stdin, classification,"
                    " decision) VALUES (?, ?, 'held', ?, ?, ?, ?, ?)",
                    row,
                )
        except sqlite3.Error as error:
            raise StoreError(
                f"cannot keep the held step {spec.run_id} {spec.step}: {error}",
                hint="check the store's storage; the command did not run",
            ) from None
        return self.get(spec.run_id, spec.step)

    def last_step(self, run_id: str) -> int:
        """The highest step of run ``run_id`` recorded or held so far (0: none)."""
        with self.locked():
            row = self.connection.execute(
                "SELECT MAX(m) FROM (SELECT MAX(step) AS m FROM events WHERE run_id = ?"
                " UNION ALL SELECT MAX(step) FROM held WHERE run_id = ?)",
                (run_id, run_id),
            ).fetchone()
        return int(row[0] or 0)

    def get(self, run_id: str, step: int) -> HeldStep:
        """The held step ``run_id``/``step``.

        Raises:
            UsageError: the store has no such step.
        """
        with self._lock:
            row = self._db.execute(
                f"SELECT {_COLUMNS} FROM held WHERE run_id=? AND step=?",  # noqa: S608
                (run_id, step),
            ).fetchone()
        if row is None:
            raise UsageError(
                f"no held step {run_id} {step}",
                hint="`stockade pending` lists the steps waiting for a person",
                details={"run_id": run_id, "step": step},
            )
        return _step(row)

    def waiting(self) -> list[HeldStep]:
        """Every step still waiting for a person, oldest first."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM held WHERE state='held' ORDER BY created"  # noqa: S608
            ).fetchall()
        return [_step(row) for row in rows]

    def answer(self, run_id: str, step: int, *, approve: bool, by: str) -> HeldStep:
        """Record a person's answer to a held step.

        Raises:
            UsageError: no such step, or it was already answered.
        """
        state = "approved" if approve else "declined"
        changed = self._move(run_id, step, "held", state, answered_by=by, answered_at=time.time())
        if not changed:
            current = self.get(run_id, step)
            raise UsageError(
                f"step {run_id} {step} was already {current.state}"
                + (f" by {current.answered_by}" if current.answered_by else ""),
                details={"run_id": run_id, "step": step, "state": current.state},
            )
        return self.get(run_id, step)

    def hold_again(self, run_id: str, step: int, decision: Decision) -> bool:
        """Put an approved step back to wait for a person, asked now for ``decision`` (the
        breaker's ask: its run came to hold both kinds after it was shown); ``False`` when
        it is not (or no longer) approved."""
        from ..request.wire import to_json

        return self._move(
            run_id,
            step,
            "approved",
            "held",
            decision=to_json(decision),
            answered_by=None,
            answered_at=None,
        )

    def claim(self, run_id: str, step: int) -> bool:
        """Take an approved step to run it; ``False`` when it is not (or no longer) approved."""
        return self._move(run_id, step, "approved", "running")

    def finish(self, run_id: str, step: int, *, outcome: str, failed: bool = False) -> None:
        """Keep what running a claimed step gave: its result or its error, as JSON."""
        self._move(run_id, step, "running", "failed" if failed else "done", outcome=outcome)

    def _move(self, run_id: str, step: int, before: str, after: str, **fields: object) -> bool:
        sets = ", ".join(f"{name}=?" for name in ("state", *fields))
        try:
            with self._lock:
                cursor = self._db.execute(
                    f"UPDATE held SET {sets} WHERE run_id=? AND step=? AND state=?",  # noqa: S608
                    (after, *fields.values(), run_id, step, before),
                )
        except sqlite3.Error as error:
            raise StoreError(f"cannot update step {run_id} {step}: {error}") from None
        return cursor.rowcount == 1


OPEN_TIMEOUT = 10.0
"""Seconds an open waits for other connections (the same as every statement's timeout)."""


def _write_ahead(db: sqlite3.Connection) -> None:
    """Put the store in WAL mode. SQLite answers ``database is locked`` at once, without
    its busy handler, when another connection is switching a new file's journal mode at the
    same moment (two hosts opening one fresh store: a server's first call and its prewarm,
    say), so the switch is tried again until :data:`OPEN_TIMEOUT`."""
    deadline = time.monotonic() + OPEN_TIMEOUT
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def open_store(config: Config, *, read_only: bool = False) -> Store:
    """The store the config names (created, owner-only, on first use; ``read_only``: as
    it is, never created, migrated or written, for what only reads the record).

    Raises:
        StoreError: it cannot be opened or is newer than this Stockade (``read_only``: or
            there is none, or its schema is older).
    """
    return Store(store_path(config), read_only=read_only)


def _read_only(path: str) -> sqlite3.Connection:
    """A connection that reads the store at ``path`` and can write nothing to it: what
    only reads the record (``verify``, ``log``, ``show``, ``replay``) must leave the
    evidence as it found it, and must not make an empty store where the record should be
    (a store removed whole would then pass ``verify`` as a record of no events). SQLite may
    still make its shared-memory side files beside it to read a live write-ahead log, and
    writes into an existing ``-shm``: one that is not a plain file of its own (a hard link
    to the signing key, say) is refused first. A copy in a folder that cannot be written
    (no ``-shm`` can be made) and with no write-ahead log is read as an immutable file."""
    if not os.path.isfile(path):
        raise StoreError(
            f"there is no record at {path}",
            hint="nothing has been recorded with this config yet, or the store was moved or"
            " removed: check store.path in the config",
            details={"path": path},
        )
    _plain_sides(path)
    try:
        try:
            db, row = _connect(path, "mode=ro")
        except sqlite3.OperationalError:
            if os.path.lexists(f"{path}-wal") or os.access(os.path.dirname(path) or ".", os.W_OK):
                raise
            db, row = _connect(path, "immutable=1")  # nothing can be written here, or beside
    except sqlite3.Error as error:
        raise StoreError(
            f"cannot read the store {path}: {error}",
            hint="check that it is a Stockade store and that you may read it and its folder",
            details={"path": path},
        ) from None
    try:
        version = int(str(row[0])) if row is not None else 0
    except ValueError:
        version = -1
    if version != SCHEMA_VERSION:
        db.close()
        newer = version > SCHEMA_VERSION
        shown = version if version >= 0 else repr(row[0] if row is not None else None)
        raise StoreError(
            f"the store {path}'s schema is version {shown}, "
            + ("newer than this Stockade knows" if newer else "older than this Stockade's")
            + f" ({SCHEMA_VERSION})",
            hint="upgrade Stockade"
            if newer
            else "run one command with this config (`stockade run -- true`) to upgrade it",
            details={"path": path, "schema": shown},
        )
    return db


def _connect(path: str, how: str) -> tuple[sqlite3.Connection, tuple[object, ...] | None]:
    from urllib.request import pathname2url

    db = sqlite3.connect(
        f"file:{pathname2url(os.path.abspath(path))}?{how}",
        uri=True,
        timeout=OPEN_TIMEOUT,
        isolation_level=None,
        check_same_thread=False,
    )
    try:
        db.execute("PRAGMA query_only=1")
        row: tuple[object, ...] | None = db.execute(
            "SELECT value FROM meta WHERE key='schema'"
        ).fetchone()
    except sqlite3.Error:
        db.close()
        raise
    return db, row


def _plain_sides(path: str) -> None:
    """Refuse a store whose side files (write-ahead log, its index, a rollback journal)
    are not plain files of their own: SQLite would write into them."""
    for suffix in ("-wal", "-shm", "-journal"):
        try:
            info = os.lstat(path + suffix)
        except FileNotFoundError:
            continue
        except OSError as error:
            why = f"unreadable ({error.strerror})"
        else:
            if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
                continue
            why = "a hard link" if stat.S_ISREG(info.st_mode) else "not a regular file"
        raise StoreError(
            f"the store {path}'s side file {path}{suffix} is {why}: refused, nothing was"
            " read (SQLite writes into it, so a link to another file would change that file)",
            hint="look at what it is; remove it if no Stockade process has the store open",
            details={"path": path + suffix},
        )


def _without_stdin(spec: ExecSpec) -> ExecSpec:
    import attrs

    return attrs.evolve(spec, stdin=b"")


def _step(row: tuple[object, ...]) -> HeldStep:
    from ..request.wire import structure

    run_id, step, state, created, spec, stdin, classification, decision, by, at, outcome = row
    full = structure(json.loads(str(spec)), ExecSpec)
    import attrs

    return HeldStep(
        str(run_id),
        int(step),  # type: ignore[call-overload]
        state=state,  # type: ignore[arg-type]
        created=float(created),  # type: ignore[arg-type]
        spec=attrs.evolve(full, stdin=bytes(stdin)),  # type: ignore[call-overload]
        classification=structure(json.loads(str(classification)), Classification),
        decision=structure(json.loads(str(decision)), Decision),
        answered_by=None if by is None else str(by),
        answered_at=None if at is None else float(at),  # type: ignore[arg-type]
        outcome=None if outcome is None else str(outcome),
    )
