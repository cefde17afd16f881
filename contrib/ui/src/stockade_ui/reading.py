"""Reading the store for the page: runs, one run's steps paired, and what has changed.

The record (:mod:`stockade.record.chain`) and the held steps (:mod:`stockade.record.store`) are read
as they are; nothing here writes. Two readers are of the page's own, beside
:func:`stockade.record.chain.rows`: the runs list is one aggregate query (the page must not parse
every event of every run to list them), and one run's events can be read for a few steps
only, so that a live update of a long run costs what changed, not the whole run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from attrs import field, frozen

from stockade.config.schema import Config
from stockade.errors import StockadeError
from stockade.record.blobs import (
    BlobError,
    CheckedBlobs,
    blob_changed,
    file_identity,
    open_blob_file,
)
from stockade.record.chain import Row
from stockade.record.store import HeldStep, Store

RUNS_SHOWN = 200
PREVIEW_LINES = 12
PREVIEW_BYTES = 2048
CHECKED_BYTES = 1 << 20  # a blob this small is previewed from the bytes that were hashed
LARGEST = (1 << 63) - 1  # SQLite's largest integer: a step or event number past it is none

# Only constants and a fixed clause are formatted in, never input.
_RUNS = f"""
SELECT run_id, min(time), max(time),
  sum(kind = 'action'),
  sum(kind = 'result' AND json_extract(body, '$.result.exit_code') = 0
      AND NOT json_extract(body, '$.result.timed_out')
      AND NOT json_extract(body, '$.result.aborted')),
  sum(kind = 'result'),
  sum(kind = 'error'),
  sum(kind = 'permission' AND json_extract(body, '$.decision.verdict') = 'deny'),
  group_concat(DISTINCT CASE WHEN kind = 'action' THEN json_extract(body, '$.profile') END),
  (SELECT first.body FROM events AS first WHERE first.run_id = events.run_id
   AND first.kind = 'action' ORDER BY first.seq LIMIT 1)
FROM events WHERE run_id != '' {{where}} GROUP BY run_id ORDER BY min(seq) DESC LIMIT {RUNS_SHOWN}
"""  # noqa: S608


@frozen
class RunSummary:
    """One run as the runs list shows it.

    Attributes:
        run_id: the run.
        started: its first event (seconds since the epoch).
        last: its last event.
        steps: commands asked (what a budget counts).
        ok: commands that exited 0 on their own.
        failed: commands that ran and did not (a status, a signal, a timeout).
        errors: commands allowed that could not run.
        denied: commands the policy refused.
        held: steps waiting for a person now.
        running: steps a person let go ahead, not finished yet.
        declined: steps a person declined.
        profiles: the agent profiles of its commands.
        budget: what of its profile's budget it used, in words (empty: no budget).
        first: the argv of its first command (empty when none was recorded).
        waits: the steps waiting for a person now, as (step, argv), in step order.
    """

    run_id: str
    started: float = field(kw_only=True)
    last: float = field(kw_only=True)
    steps: int = field(kw_only=True)
    ok: int = field(kw_only=True)
    failed: int = field(kw_only=True)
    errors: int = field(kw_only=True)
    denied: int = field(kw_only=True)
    held: int = field(kw_only=True)
    running: int = field(kw_only=True)
    declined: int = field(kw_only=True)
    profiles: tuple[str, ...] = field(kw_only=True)
    budget: str = field(kw_only=True)
    first: tuple[str, ...] = field(kw_only=True, default=())
    waits: tuple[tuple[int, tuple[str, ...]], ...] = field(kw_only=True, default=())

    @property
    def status(self) -> str:
        """``waiting`` (a person is needed), ``running`` or ``quiet``."""
        if self.held:
            return "waiting"
        settled = self.ok + self.failed + self.errors + self.denied + self.declined
        return "running" if self.running or settled < self.steps else "quiet"


def runs(store: Store, config: Config, run_id: str | None = None) -> list[RunSummary]:
    """The newest runs first (at most :data:`RUNS_SHOWN`), or the one run ``run_id``."""
    where, args = ("AND run_id = ?", (run_id,)) if run_id is not None else ("", ())
    with store.locked():
        db = store.connection
        found = db.execute(_RUNS.format(where=where), args).fetchall()
        held_rows = db.execute(
            "SELECT run_id, state, count(*) FROM held GROUP BY run_id, state"
        ).fetchall()
    held: dict[tuple[str, str], int] = {(run, state): count for run, state, count in held_rows}
    waits: dict[str, list[tuple[int, tuple[str, ...]]]] = {}
    for one in sorted(store.waiting(), key=lambda one: one.step):
        waits.setdefault(one.run_id, []).append((one.step, tuple(one.spec.argv)))
    summaries = []
    for run, started, last, steps, ok, results, errors, denied, profiles, first in found:
        names = tuple(sorted(set(str(profiles or "").split(",")) - {""}))
        summaries.append(
            RunSummary(
                run,
                started=started,
                last=last,
                steps=steps,
                ok=ok,
                failed=results - ok,
                errors=errors,
                denied=denied,
                held=held.get((run, "held"), 0),
                running=held.get((run, "approved"), 0) + held.get((run, "running"), 0),
                declined=held.get((run, "declined"), 0),
                profiles=names,
                budget=_budget(config, names, steps, last - started),
                first=tuple(json.loads(first).get("argv", ())) if first else (),
                waits=tuple(waits.get(run, ())),
            )
        )
    return summaries


def _budget(config: Config, profiles: tuple[str, ...], steps: int, elapsed: float) -> str:
    """What the run used of its profile's budget (one profile: runs rarely mix them)."""
    if len(profiles) != 1:
        return ""
    try:
        budget = config.profile(profiles[0]).budget
    except StockadeError:
        return ""
    parts = []
    if budget.steps is not None:
        parts.append(f"{steps} of {budget.steps} steps")
    if budget.duration is not None:
        parts.append(f"{elapsed:.0f} of {budget.duration:g} s")
    return ", ".join(parts)


def run_exists(store: Store, run_id: str) -> bool:
    """Whether the record holds any event of ``run_id``."""
    with store.locked():
        found = store.connection.execute(
            "SELECT 1 FROM events WHERE run_id = ? LIMIT 1", (run_id,)
        ).fetchone()
    return found is not None


# --- versions: what the live updates compare ------------------------------------------------


def version(store: Store, run_id: str | None = None) -> str:
    """A short value that changes whenever an event is recorded or a held step moves (in
    the whole store, or in one run): ``SEQ.DIGEST``, where ``SEQ`` is the last event's."""
    where, args = ("WHERE run_id = ?", (run_id,)) if run_id is not None else ("", ())
    with store.locked():
        db = store.connection
        (seq,) = db.execute(f"SELECT coalesce(max(seq), 0) FROM events {where}", args).fetchone()  # noqa: S608
        held = db.execute(
            f"SELECT run_id, step, state FROM held {where} ORDER BY run_id, step",  # noqa: S608
            args,
        ).fetchall()
    digest = hashlib.sha256(json.dumps(held).encode()).hexdigest()[:16]
    return f"{seq}.{digest}"


def seq_of(version_text: str) -> int:
    """The event number a version names (0 for anything else)."""
    head = version_text.partition(".")[0]
    # isdigit() also takes other scripts' digits; a number past SQLite's is none either
    if not (head.isascii() and head.isdigit()) or len(head) > 19:
        return 0
    return min(int(head), LARGEST)


# --- one run's steps ----------------------------------------------------------------------


def events_of(store: Store, run_id: str, *, after: int = 0, steps: Iterable[int] = ()) -> list[Row]:
    """The events of ``run_id`` in order; with ``after`` (or ``steps``), only those of the
    steps that have an event past it (or are named): whole steps, so each can be drawn
    again."""
    query = "SELECT seq, run_id, step, action_id, kind, time, body FROM events WHERE run_id = ?"
    args: tuple[object, ...] = (run_id,)
    named = tuple(int(step) for step in steps)
    if after or named:
        marks = ", ".join("?" * len(named)) or "NULL"
        query += (
            " AND (step IN (SELECT step FROM events WHERE run_id = ? AND seq > ?)"  # noqa: S608 - placeholders only
            f" OR step IN ({marks}))"
        )
        args = (run_id, run_id, after, *named)
    with store.locked():
        found = store.connection.execute(query + " ORDER BY seq", args).fetchall()
    return [Row(s, r, st, a, k, t, json.loads(b)) for s, r, st, a, k, t, b in found]


def result_of(store: Store, run_id: str, step: int) -> dict[str, Any] | None:
    """The recorded result of one step (its last), or ``None`` (also for a step number no
    record can hold)."""
    if not 0 <= step <= LARGEST:
        return None
    with store.locked():
        found = store.connection.execute(
            "SELECT body FROM events WHERE run_id = ? AND step = ? AND kind = 'result'"
            " ORDER BY seq DESC LIMIT 1",
            (run_id, step),
        ).fetchone()
    return None if found is None else dict(json.loads(found[0])["result"])


def held_of(store: Store, run_id: str) -> dict[int, HeldStep]:
    """The steps of ``run_id`` that waited for a person, in whatever state, by number."""
    with store.locked():
        numbers = [
            step
            for (step,) in store.connection.execute(
                "SELECT step FROM held WHERE run_id = ? ORDER BY step", (run_id,)
            ).fetchall()
        ]
    return {step: store.get(run_id, step) for step in numbers}


@frozen
class Preview:
    """The head and tail of one recorded stream, and where the whole of it is.

    Attributes:
        stream: ``stdout`` or ``stderr``.
        total_bytes: the length of the whole stream.
        head: its first lines (the whole stream when it is short).
        tail: its last lines; empty when :attr:`head` holds it all.
        left_out: bytes between head and tail.
        checked: the whole content was re-hashed and matches its digest (always, when
            anything of it is shown).
        problem: why the content cannot be read (missing, changed), or empty.
    """

    stream: str
    total_bytes: int = field(kw_only=True)
    head: str = field(kw_only=True, default="")
    tail: str = field(kw_only=True, default="")
    left_out: int = field(kw_only=True, default=0)
    checked: bool = field(kw_only=True, default=False)
    problem: str = field(kw_only=True, default="")


def preview(
    store: Store, stream: str, recorded: dict[str, Any], checked: CheckedBlobs | None = None
) -> Preview | None:
    """The preview of a result's ``stdout`` or ``stderr``; ``None`` when it was empty. The
    whole blob is re-hashed before any of it is shown (``checked`` remembers blob files
    hashed before and unchanged since); a changed or missing one shows only its problem."""
    digest, total = recorded.get("blob"), int(recorded.get("total_bytes", 0))
    if not digest:
        return None
    try:
        with open_blob_file(store, digest) as handle:
            before = file_identity(handle)
            size = before[2]
            if size <= CHECKED_BYTES:  # the very bytes hashed are the ones shown
                data = handle.read()
                actual = hashlib.sha256(data).hexdigest()
                if actual != digest:
                    raise blob_changed(digest, actual)
                head, tail = data[:PREVIEW_BYTES], data[-PREVIEW_BYTES:]
            else:
                (checked or CheckedBlobs()).check(handle, digest)
                head = handle.read(PREVIEW_BYTES)
                handle.seek(size - PREVIEW_BYTES)
                tail = handle.read(PREVIEW_BYTES)
                if file_identity(handle) != before:  # written to while it was hashed or read
                    raise blob_changed(digest, "something else (it changed while it was read)")
    except BlobError as error:
        return Preview(stream, total_bytes=total, problem=_refusal(error))
    except OSError as error:
        return Preview(
            stream,
            total_bytes=total,
            problem=f"it is missing ({error.strerror}): run `stockade verify`",
        )
    return _cut(stream, size, head, tail, checked=True)


def _refusal(error: BlobError) -> str:
    """Why a blob is not shown, for the page."""
    actual = error.details.get("actual")
    if actual:
        return (
            f"its content was changed after it was recorded (blob {error.details['blob']}"
            f" now hashes to {actual}): run `stockade verify`"
        )
    return f"{error.message}: run `stockade verify`"


def _cut(stream: str, size: int, head: bytes, tail: bytes, *, checked: bool) -> Preview:
    """The first and last lines of a stream of ``size`` bytes whose first bytes are
    ``head`` and whose last are ``tail`` (each at most :data:`PREVIEW_BYTES`)."""
    if size <= PREVIEW_BYTES and head.count(b"\n") <= 2 * PREVIEW_LINES:
        return Preview(stream, total_bytes=size, head=_text(head), checked=checked)
    first = b"".join(head.splitlines(keepends=True)[:PREVIEW_LINES])
    tail_starts = size - len(tail)
    start = max(len(first), tail_starts)
    lines = tail[start - tail_starts :].splitlines(keepends=True)
    if start > len(first) and len(lines) > 1:
        lines = lines[1:]  # the window began inside a line
    last = b"".join(lines[-PREVIEW_LINES:])
    return Preview(
        stream,
        total_bytes=size,
        head=_text(first),
        tail=_text(last),
        left_out=size - len(first) - len(last),
        checked=checked,
    )


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")
