"""``stockade log``, ``show``, ``replay`` and ``verify``: reading the record back."""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..display import command, quote, visible
from ..errors import StockadeError, UsageError
from .common import report_error

if TYPE_CHECKING:
    import argparse

    from ..record import Row
    from ..store import Store

REDACTED = "[redacted]"


def _open(args: argparse.Namespace) -> Store:
    import os

    from ..config import load_config
    from ..store import open_store

    return open_store(load_config(args.config, environ=os.environ))


def steps(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """One summary per step, in the order the steps began."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        step = found.setdefault(
            (row.run_id, row.step),
            {"run_id": row.run_id, "step": row.step, "time": row.time, "state": "unfinished"},
        )
        body = row.body
        if row.kind == "action":
            step.update(argv=body["argv"], cwd=body["cwd"], profile=body["profile"])
        elif row.kind == "permission":
            step.update(kind=body["classification"]["kind"], verdict=body["decision"]["verdict"])
            verdict = body["decision"]["verdict"]
            step["state"] = {"deny": "denied", "ask": "held"}.get(verdict, "unfinished")
        elif row.kind == "result":
            result = body["result"]
            step.update(state="ran", exit_code=result["exit_code"], signal=result["signal"])
            step["timed_out"] = result["timed_out"]
        elif row.kind == "error":
            step.update(state="error", error=body["code"])
    return list(found.values())


def log_command(args: argparse.Namespace, _parser: object = None) -> int:
    """List the recorded steps (of one run with ``--run``)."""
    from ..record import rows

    try:
        store = _open(args)
        summary = steps(rows(store, args.run))
        store.close()
    except StockadeError as error:
        return report_error(error, as_json=args.json)
    if args.json:
        import json

        print(json.dumps(summary, indent=2))
        return 0
    for step in summary:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(step["time"]))
        state = step["state"]
        if state == "ran":
            state = f"exit {step['exit_code']}" if step["signal"] is None else step["signal"]
        argv = command(step.get("argv", ["?"]))
        kind, state = visible(str(step.get("kind", "-"))), visible(str(state))
        print(f"{visible(step['run_id'])} {step['step']:>3}  {when}  {kind:<8} {state:<10} {argv}")
    return 0


def show_command(args: argparse.Namespace, _parser: object = None) -> int:
    """The whole output of one recorded step: stdout to stdout, stderr to stderr."""
    from ..record import get_blob, rows

    try:
        store = _open(args)
        results = [r for r in rows(store, args.run) if r.step == args.step and r.kind == "result"]
        if not results:
            raise UsageError(
                f"step {args.step} of run {args.run} has no recorded result",
                hint="`stockade log --run RUN` lists its steps and what became of them",
            )
        result = results[-1].body["result"]
        streams = {
            name: get_blob(store, result[name]["blob"]) if result[name]["blob"] else b""
            for name in ("stdout", "stderr")
        }
        store.close()
    except StockadeError as error:
        return report_error(error, as_json=False)
    _write(sys.stdout, streams["stdout"])
    _write(sys.stderr, streams["stderr"])
    return 0


def _write(stream: Any, data: bytes) -> None:  # noqa: ANN401 - a text stream with .buffer
    """``data`` as it was, except at a terminal: there what could rewrite the screen
    (controls, bidirectional and invisible characters) is shown as escapes."""
    if stream.isatty():
        stream.write(visible(data.decode("utf-8", "surrogateescape"), keep="\n\t"))
    else:
        stream.buffer.write(data)
    stream.flush()


def replay_command(args: argparse.Namespace, _parser: object = None) -> int:
    """One run as a timeline: what was asked, what was decided, what came back."""
    from ..record import rows

    try:
        store = _open(args)
        found = list(rows(store, args.run))
        store.close()
        if not found:
            raise UsageError(f"no events recorded for run {args.run}", hint="`stockade log`")
    except StockadeError as error:
        return report_error(error, as_json=args.json)
    shown = not args.json
    timeline = [_entry(row, found[0].time, redact=args.redact, shown=shown) for row in found]
    if args.json:
        import json

        print(json.dumps(timeline, indent=2))
        return 0
    for entry in timeline:
        print(f"+{entry['at']:8.3f}s  step {entry['step']:>3}  {entry['kind']:<10} {entry['text']}")
    return 0


def _entry(row: Row, start: float, *, redact: bool, shown: bool = False) -> dict[str, Any]:
    """One timeline entry; ``shown``: its text is for a terminal (argv and paths as shell
    words, hidden characters escaped), else exact for JSON."""
    body = row.body
    text = ""
    join: Callable[[Iterable[str]], str] = command if shown else shlex.join
    word: Callable[[str], str] = quote if shown else str
    prose: Callable[[str], str] = visible if shown else str
    if row.kind == "action":
        argv = REDACTED if redact else join(body["argv"])
        cwd = REDACTED if redact else word(body["cwd"])
        text = f"{argv}  (cwd {cwd}, {prose(body['mode'])}, {prose(body['origin'])})"
    elif row.kind == "permission":
        decision = body["decision"]
        kind, verdict = prose(body["classification"]["kind"]), prose(decision["verdict"])
        text = f"{kind} -> {verdict} by {prose(decision['by'])}: "
        text += REDACTED if redact else prose(decision["reason"])
    elif row.kind == "grant":
        folders = REDACTED if redact else ", ".join(word(f) for f in body["writable"])
        text = f"writable {folders} for this command, granted by {prose(body['by'])}"
    elif row.kind == "result":
        result = body["result"]
        ended = f"exit {result['exit_code']}" if result["signal"] is None else result["signal"]
        provider = prose(result["sandbox"]["provider"])
        text = f"{prose(str(ended))} in {result['duration_ms']:.1f} ms, sandbox {provider}"
        if result["timed_out"]:
            text += ", timed out"
        if not redact:
            sizes = (result[s]["total_bytes"] for s in ("stdout", "stderr"))
            text += ", stdout {} B, stderr {} B".format(*sizes)
    elif row.kind == "error":
        text = f"{prose(body['code'])}: {REDACTED if redact else prose(body['message'])}"
    elif row.kind == "connection":
        verdict = "allowed" if body["allowed"] else "refused"
        text = prose(f"{body['method']} {body['host']}:{body['port']} {verdict}: {body['reason']}")
        if body["allowed"]:
            text += f", {body['bytes_up']} B up, {body['bytes_down']} B down"
    elif row.kind == "quarantine":
        moved, back = len(body["quarantined"]), len(body["restored"])
        text = f"after the command: {moved} quarantined, {back} restored"
        if moved and not redact:
            text += f", into {prose(body['folder'])}"
    entry: dict[str, Any] = {"seq": row.seq, "step": row.step, "kind": row.kind, "text": text}
    entry["at"] = round(row.time - start, 6)
    entry["event"] = _redacted(body) if redact else body
    return entry


def _redacted(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without what redaction covers: argv (and the reasons that quote it), cwd,
    env names, stdin and output."""
    hidden = dict(body)
    for key in (
        "argv",
        "cwd",
        "env_names",
        "stdin_sha256",
        "message",
        "writable",
        "quarantined",
        "restored",
        "folder",
        "failed",
    ):
        if key in hidden:
            hidden[key] = REDACTED
    if "classification" in hidden:
        hidden["classification"] = {
            **hidden["classification"],
            "reasons": REDACTED,
            "programs": REDACTED,
        }
        hidden["decision"] = {**hidden["decision"], "reason": REDACTED}
    if "result" in hidden:
        result = dict(hidden["result"])
        result["argv"] = REDACTED
        result["classification"] = REDACTED
        result["decision"] = {**result["decision"], "reason": REDACTED}
        for stream in ("stdout", "stderr"):
            result[stream] = REDACTED
        hidden["result"] = result
    return hidden


def verify_command(args: argparse.Namespace, _parser: object = None) -> int:
    """Check the record's chain; exit 0 when it holds, 1 naming the first bad event."""
    from ..record import verify

    try:
        store = _open(args)
        verdict = verify(store)
        store.close()
    except StockadeError as error:
        return report_error(error, as_json=args.json)
    if args.json:
        import json

        print(
            json.dumps(
                {
                    "ok": verdict.ok,
                    "events": verdict.events,
                    "bad_seq": verdict.bad_seq,
                    "problem": verdict.problem,
                },
                indent=2,
            )
        )
    elif verdict.ok:
        print(f"ok: {verdict.events} events, every link and signature holds")
    else:
        print(f"stockade: the record does not verify: {verdict.problem}", file=sys.stderr)
    return 0 if verdict.ok else 1
