"""One run as a timeline: each step's events paired by ``action_id``, and its outcome.

A step is one command: its ``action`` event (what was asked), the ``permission`` events
(the policy's decision, then a person's answer when it was held), a ``grant``, the
``connection`` events of its egress proxy, a ``decline`` when a person declined it, a
``placement`` when it was carried out on another node (``stockade-ray``), and how it
ended (a ``result``, or an ``error`` when it could not run); the ``taint`` events it caused
(what the breaker counts); what became of its writes after it (``quarantine``, a
``conflict``, a ``layer`` event: a person's answer under ``commit = "ask"``, or a later
host finishing or discarding a killed one's commit). A held step's state comes from
the store's held steps: it may be waiting, let go ahead but not run yet, or running in
another process, which are not events.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from attrs import field, frozen

from stockade.record.blobs import CheckedBlobs
from stockade.record.chain import Row
from stockade.record.store import HeldStep, Store

from .reading import Preview, preview


@frozen
class Line:
    """One event of a step, in words.

    Attributes:
        seq: its place in the record.
        kind: its kind (``permission``, ``grant``, ``connection``, ``taint``, ``decline``,
            ``error``, ``quarantine``, ``conflict``, ``layer``).
        text: what it says.
        by: who decided, for a permission or a grant.
        tone: ``ok``, ``ask``, ``bad`` or empty: how the page colours it.
    """

    seq: int
    kind: str
    text: str
    by: str = ""
    tone: str = ""


@frozen
class Step:
    """One command of a run, as the run page draws it.

    Attributes:
        step: its number in the run.
        seq: its first event's place in the record.
        time: when it was asked.
        argv: the argv as requested.
        cwd: where it ran.
        mode: its sandbox mode.
        profile: its agent profile.
        origin: who typed it.
        kind: what it was judged to affect (empty before the decision).
        state: ``ok``, ``failed``, ``error``, ``denied``, ``held``, ``approved``,
            ``running``, ``declined``, ``asked`` or ``unfinished``.
        outcome: how it ended, in words.
        lines: its events after the action, in order.
        outputs: previews of its non-empty streams.
        changes: what it changed in its workspace (the recorded ``Changes``), if watched.
        held: the held step, when it waited for a person.
        placed: where it was carried out (``node``, ``actor``, ``hostname``), when a
            ``placement`` event says so (``stockade-ray``); ``None`` for this machine.
        last_seq: its last event's place in the record.
    """

    step: int
    seq: int = field(kw_only=True)
    time: float = field(kw_only=True)
    argv: tuple[str, ...] = field(kw_only=True)
    cwd: str = field(kw_only=True)
    mode: str = field(kw_only=True)
    profile: str = field(kw_only=True)
    origin: str = field(kw_only=True)
    kind: str = field(kw_only=True)
    state: str = field(kw_only=True)
    outcome: str = field(kw_only=True)
    lines: tuple[Line, ...] = field(kw_only=True)
    outputs: tuple[Preview, ...] = field(kw_only=True)
    changes: dict[str, Any] | None = field(kw_only=True)
    held: HeldStep | None = field(kw_only=True)
    placed: dict[str, str] | None = field(kw_only=True, default=None)
    last_seq: int = field(kw_only=True)


def build(
    store: Store,
    rows: Iterable[Row],
    held: dict[int, HeldStep],
    checked: CheckedBlobs | None = None,
) -> list[Step]:
    """The steps of these events (and of the held steps among ``held``), in step order;
    ``checked`` remembers the blobs whose previews were re-hashed."""
    grouped: dict[int, list[Row]] = {}
    for row in rows:
        if row.kind == "taint" and row.step == 0:
            continue  # a file tool's before any step: the breaker's reason names it
        grouped.setdefault(row.step, []).append(row)
    return [
        _step(store, number, events, held.get(number), checked)
        for number, events in sorted(grouped.items())
    ]


def _step(
    store: Store,
    number: int,
    events: list[Row],
    held: HeldStep | None,
    checked: CheckedBlobs | None,
) -> Step:
    action: dict[str, Any] = {}
    kind, verdict = "", ""
    lines: list[Line] = []
    result: dict[str, Any] | None = None
    error = ""
    placed: dict[str, str] | None = None
    for row in events:
        body = row.body
        if row.kind == "action":
            action = body
        elif row.kind == "permission":
            kind, decision = body["classification"]["kind"], body["decision"]
            verdict = decision["verdict"]
            lines.append(_permission(row.seq, kind, decision))
        elif row.kind == "result":
            result = body["result"]
        elif row.kind == "error":
            error = f"{body['code']}: {body['message']}"
            lines.append(Line(row.seq, "error", error, tone="bad"))
        elif row.kind == "placement":
            placed = {key: body[key] for key in ("node", "actor", "hostname")}
        else:
            line = _line(row)
            if line is not None:
                lines.append(line)
    state, outcome = _state(result, error, verdict, held)
    outputs: list[Preview] = []
    if result is not None:
        for stream in ("stdout", "stderr"):
            shown = preview(store, stream, result[stream], checked)
            if shown is not None:
                outputs.append(shown)
    first = events[0]
    return Step(
        number,
        seq=first.seq,
        time=first.time,
        argv=tuple(action.get("argv", held.spec.argv if held else ())),
        cwd=action.get("cwd", ""),
        mode=action.get("mode", ""),
        profile=action.get("profile", ""),
        origin=action.get("origin", ""),
        kind=kind,
        state=state,
        outcome=outcome,
        lines=tuple(lines),
        outputs=tuple(outputs),
        changes=result.get("changes") if result is not None else None,
        held=held,
        placed=placed,
        last_seq=events[-1].seq,
    )


def _line(row: Row) -> Line | None:
    """The line of an event that only adds one (a grant, a connection, a taint, a decline)."""
    body = row.body
    if row.kind == "grant":
        folders = ", ".join(body["writable"])
        text = f"writable for this command only: {folders}"
        return Line(row.seq, "grant", text, body["by"], "ask")
    if row.kind == "connection":
        return _connection(row.seq, body)
    if row.kind == "taint":
        what = "private data" if body["taint"] == "private" else "somebody else's words"
        text = f"the run holds {what}: {body['source']} {body['detail']}"
        return Line(row.seq, "taint", text, tone="ask")
    if row.kind == "decline":
        return Line(row.seq, "decline", f"{body['reason']}: it never runs", body["by"], "bad")
    if row.kind in ("quarantine", "conflict", "layer"):
        return _landing(row)
    return None


def _landing(row: Row) -> Line:
    """What became of a command's writes after it ran: protected names quarantined, its
    versions kept aside (a conflict), its layers landed or not by a person or a later host."""
    body = row.body
    if row.kind == "quarantine":
        moved = ", ".join(body["quarantined"]) or "nothing"
        text = f"quarantined (protected names never land): {moved}"
        if body["restored"]:
            text += f"; put back: {', '.join(body['restored'])}"
        return Line(row.seq, "quarantine", text, tone="ask")
    if row.kind == "conflict":
        rivals = ", ".join(body["rivals"]) or "another program (a person's edit)"
        text = (
            f"kept aside, changed in the folder since it started: {', '.join(body['paths'])}; "
            f"changed first by {rivals}"
        )
        return Line(row.seq, "conflict", text, tone="bad")
    words = {
        "landed": "its writes landed",
        "refused": "its writes were refused: nothing of them landed",
        "finished": "a later host finished landing its writes (its own was killed)",
        "discarded": "a later host discarded its writes (its own was killed while it ran)",
    }[body["outcome"]]
    text = f"{words} ({len(body['changed'])} paths changed)"
    if body["quarantined"]:
        text += f"; quarantined: {', '.join(body['quarantined'])}"
    if body["failed"]:
        text += f"; not done: {'; '.join(body['failed'])}"
    tone = "ok" if body["outcome"] in ("landed", "finished") else "bad"
    return Line(row.seq, "layer", text, body.get("by", ""), tone)


def _state(
    result: dict[str, Any] | None, error: str, verdict: str, held: HeldStep | None
) -> tuple[str, str]:
    """The step's state and its outcome in words."""
    if result is not None:
        ended = f"exit {result['exit_code']}" if result["signal"] is None else result["signal"]
        words = [f"{ended} in {result['duration_ms']:.1f} ms"]
        if result["timed_out"]:
            words.append(f"timed out after {result['timeout_s']:g} s")
        if result["aborted"]:
            words.append("aborted")
        if result.get("limit_hit"):
            words.append(f"limit hit: {result['limit_hit']}")
        landed = result.get("landed")
        if landed in LANDED:
            words.append(LANDED[landed])
        sandbox = result["sandbox"]
        where = f"sandbox {sandbox['provider']} ({sandbox['mode']}"
        where += f", {sandbox['enforcement']})" if sandbox.get("enforcement") else ")"
        words.append(where)
        ok = result["exit_code"] == 0 and not (result["timed_out"] or result["aborted"])
        return ("ok" if ok else "failed"), ", ".join(words)
    if error:
        return "error", error
    if held is not None:
        by = f" by {held.answered_by}" if held.answered_by else ""
        return held.state, {
            "held": "waits for a person",
            "approved": f"let go ahead{by}; not started yet",
            "running": f"let go ahead{by}; running",
            "declined": f"declined{by}: it never ran",
            "done": f"let go ahead{by}",
            "failed": f"let go ahead{by}; it could not run",
        }[held.state]
    if verdict == "deny":
        return "denied", "denied: it never ran"
    if verdict == "ask":
        return "asked", "it asked for a person and was not held"
    return "unfinished", "no result recorded (still running, or its process ended first)"


LANDED = {
    "discarded": "its writes were discarded (a dry run, or commit = on-success)",
    "over-quota": "its writes were discarded: over the quota",
    "waiting": "its writes wait for a person (stockade land)",
    "refused": "a person refused its writes",
}
"""How a result whose layers did not land (at once) says so."""

PREAPPROVED = "approved in advance: "  # the host's words for a ``--yes`` over an ``ask``
APPROVED = "approved: "  # the host's words for a person's answer to a held step


def _permission(seq: int, kind: str, decision: dict[str, Any]) -> Line:
    """A decision as a sentence: the class, what was decided and by whom, and why; for an
    answer given ahead (``--yes``) or later (a person), what the policy itself had said."""
    verdict, reason, by = decision["verdict"], decision["reason"], decision["by"]
    tone = {"allow": "ok", "ask": "ask", "deny": "bad"}[verdict]
    if verdict == "allow" and by == "preapproved" and reason.startswith(PREAPPROVED):
        asked = reason.removeprefix(PREAPPROVED)
        text = f"allowed in advance (--yes); the policy would have asked: {asked}"
        return Line(seq, "permission", f"{kind} \u2014 {text}", tone="ask")
    if verdict == "allow" and reason.startswith(APPROVED):
        text = f"let go ahead by {by or 'a person'}; the policy had asked: "
        return Line(
            seq, "permission", f"{kind} \u2014 {text}{reason.removeprefix(APPROVED)}", tone=tone
        )
    words = {"allow": "allowed", "ask": "held for a person", "deny": "denied"}[verdict]
    return Line(seq, "permission", f"{kind} \u2014 {words}: {reason}", by, tone)


def _connection(seq: int, body: dict[str, Any]) -> Line:
    allowed = "allowed" if body["allowed"] else "refused"
    text = f"{body['method']} {body['host']}:{body['port']} {allowed} ({body['reason']})"
    if body["allowed"]:
        text += f", {body['bytes_up']} B up, {body['bytes_down']} B down"
    return Line(seq, "connection", text, tone="ok" if body["allowed"] else "bad")


def shown_digest(held: HeldStep) -> str:
    """A digest of exactly what the page shows a held step would run: the form carries
    it, and the step is answered only when the store still holds that very spec."""
    from stockade.request.wire import to_json

    stdin = hashlib.sha256(held.spec.stdin).hexdigest()
    text = "\n".join((held.run_id, str(held.step), to_json(held.spec), stdin))
    return hashlib.sha256(text.encode()).hexdigest()
