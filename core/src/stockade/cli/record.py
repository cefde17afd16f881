"""``stockade log``, ``show``, ``replay`` and ``verify``: reading the record back."""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, BinaryIO

from ..display import command, quote, visible
from ..errors import StockadeError, UsageError
from .common import report_error

if TYPE_CHECKING:
    import argparse

    from ..record.chain import Row
    from ..record.store import Store

REDACTED = "[redacted]"


def _open(args: argparse.Namespace) -> Store:
    import os

    from ..config.load import load_config
    from ..record.store import open_store

    return open_store(load_config(args.config, environ=os.environ), read_only=True)


def _rows(args: argparse.Namespace) -> tuple[list[tuple[Row, Store]], list[Store]]:
    """The events of ``--run`` (or of all runs) in the store and its shards, and the stores
    opened for them (closed by :func:`_close`)."""
    from ..record.shards import all_rows

    store = _open(args)
    try:
        found = all_rows(store, args.run)
    except BaseException:
        store.close()
        raise
    return found, list({id(s): s for s in (store, *(s for _, s in found))}.values())


def _close(stores: Iterable[Store]) -> None:
    for store in stores:
        store.close()


def steps(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """One summary per step, in the order the steps began."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        if row.kind in ("taint", "annotation", "anchor"):
            continue  # what the breaker counts, not a step's state (`stockade replay` has it)
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
        elif row.kind == "decline":
            step.update(state="declined", declined_by=body["by"])
        elif row.kind == "placement":
            step.update(node=body["node"], actor=body["actor"], hostname=body["hostname"])
    return list(found.values())


def log_command(args: argparse.Namespace, _parser: object = None) -> int:
    """List the recorded steps (of one run with ``--run``), the shards' too
    (:mod:`stockade.record.shards`: a sharded pool's runs are recorded there)."""
    try:
        found, stores = _rows(args)
        summary = steps(row for row, _ in found)
        _close(stores)
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
        where = ""
        if "node" in step:  # carried out elsewhere (stockade-ray): which node and worker
            name = f"{step['hostname']}:" if step["hostname"] else ""
            where = visible(f"  [node {name}{step['node'][:12]} actor {step['actor'][:12]}]")
        line = f"{visible(step['run_id'])} {step['step']:>3}  {when}  {kind:<8} {state:<10} {argv}"
        print(line + where)
    return 0


def show_command(args: argparse.Namespace, _parser: object = None) -> int:
    """The whole output of one recorded step: stdout to stdout, stderr to stderr; a stream
    whose blob is missing or no longer matches its digest is refused, nothing of it shown."""
    from ..record.blobs import expected_size, open_blob

    try:
        found, stores = _rows(args)
        results = [(r, s) for r, s in found if r.step == args.step and r.kind == "result"]
        if not results:
            _close(stores)
            raise UsageError(
                f"step {args.step} of run {args.run} has no recorded result",
                hint="`stockade log --run RUN` lists its steps and what became of them",
            )
        row, held = results[-1]  # a shard's outputs are kept beside the shard's store
        result = row.body["result"]
        # Both streams are checked before either is written: nothing forged is half-shown.
        where = f"of step {args.step} of run {args.run}"
        try:
            streams = {
                name: open_blob(
                    held,
                    result[name]["blob"],
                    f"{name} {where}",
                    expected_size(result[name], result[name]["blob"]),
                )
                for name in ("stdout", "stderr")
                if result[name]["blob"]
            }
        finally:
            _close(stores)
    except StockadeError as error:
        return report_error(error, as_json=False)
    for name, target in (("stdout", sys.stdout), ("stderr", sys.stderr)):
        if name in streams:
            with streams[name] as handle:
                _write(target, handle)
    return 0


def _write(stream: Any, handle: BinaryIO) -> None:  # noqa: ANN401 - a text stream with .buffer
    """A checked stream's bytes as they were, except at a terminal: there what could
    rewrite the screen (controls, bidirectional and invisible characters) is escaped."""
    import shutil

    stream.flush()
    if stream.isatty():
        data = handle.read()
        stream.write(visible(data.decode("utf-8", "surrogateescape"), keep="\n\t"))
    else:
        shutil.copyfileobj(handle, stream.buffer)
        stream.buffer.flush()
    stream.flush()


def replay_command(args: argparse.Namespace, _parser: object = None) -> int:
    """One run as a timeline: what was asked, what was decided, what came back."""
    try:
        pairs, stores = _rows(args)  # a sharded pool's runs are in its shards
        try:
            if not pairs:
                raise UsageError(f"no events recorded for run {args.run}", hint="`stockade log`")
            shown = not args.json  # for a terminal: argv as shell words, escapes
            start = pairs[0][0].time
            timeline = [_entry(row, start, redact=args.redact, shown=shown) for row, _ in pairs]
            refused = _check_outputs([held for _, held in pairs], timeline)
        finally:
            _close(stores)
    except StockadeError as error:
        return report_error(error, as_json=args.json)
    if args.json:
        import json

        print(json.dumps(timeline, indent=2))
    else:
        for entry in timeline:
            at, step, kind = entry["at"], entry["step"], entry["kind"]
            print(f"+{at:8.3f}s  step {step:>3}  {kind:<10} {entry['text']}")
    if refused is not None:
        return report_error(refused, as_json=False)
    return 0


def _check_outputs(stores: list[Store], timeline: list[dict[str, Any]]) -> StockadeError | None:
    """Re-hash the blobs of the run's results (each in the store, main or shard, that holds
    its event): a stream whose blob is missing or changed is marked refused in its entry
    (its text never read); the first such error, if any."""
    from ..record.blobs import BlobError, check_blob, expected_size

    first: StockadeError | None = None
    for store, entry in zip(stores, timeline, strict=True):
        if entry["kind"] != "result":
            continue
        result = entry["row_result"]
        for name in ("stdout", "stderr"):
            digest = result[name].get("blob") if isinstance(result[name], dict) else None
            if not digest:
                continue
            try:
                where = f"{name} of step {entry['step']} (event {entry['seq']})"
                check_blob(store, digest, where, expected_size(result[name], digest))
            except BlobError as error:
                entry.setdefault("refused", []).append(error.to_dict())
                how = "was changed" if error.details.get("actual") else "is missing"
                entry["text"] += f"; {name} REFUSED: its blob {how} (`stockade verify`)"
                first = first or error
    for entry in timeline:
        entry.pop("row_result", None)
    return first


def _entry(row: Row, start: float, *, redact: bool, shown: bool = False) -> dict[str, Any]:
    """One timeline entry; ``shown``: its text is for a terminal (argv and paths as shell
    words, hidden characters escaped), else exact for JSON."""
    body = row.body
    text = _Text(redact=redact, shown=shown).of(row.kind, body)
    entry: dict[str, Any] = {"seq": row.seq, "step": row.step, "kind": row.kind, "text": text}
    if row.kind == "result":
        entry["row_result"] = body["result"]  # its blobs are checked, then this is dropped
    entry["at"] = round(row.time - start, 6)
    entry["event"] = _redacted(body) if redact else body
    return entry


class _Text:
    """An event's one line of replay text, for a terminal (``shown``) or exact for JSON."""

    def __init__(self, *, redact: bool, shown: bool) -> None:
        self.redact = redact
        self.join: Callable[[Iterable[str]], str] = command if shown else shlex.join
        self.word: Callable[[str], str] = quote if shown else str
        self.prose: Callable[[str], str] = visible if shown else str

    def of(self, kind: str, body: dict[str, Any]) -> str:
        line: Callable[[dict[str, Any]], str] | None = getattr(self, f"_{kind}", None)
        return line(body) if line is not None else ""

    def _action(self, body: dict[str, Any]) -> str:
        prose = self.prose
        argv = REDACTED if self.redact else self.join(body["argv"])
        cwd = REDACTED if self.redact else self.word(body["cwd"])
        return f"{argv}  (cwd {cwd}, {prose(body['mode'])}, {prose(body['origin'])})"

    def _permission(self, body: dict[str, Any]) -> str:
        prose, decision = self.prose, body["decision"]
        kind, verdict = prose(body["classification"]["kind"]), prose(decision["verdict"])
        reason = REDACTED if self.redact else prose(decision["reason"])
        return f"{kind} -> {verdict} by {prose(decision['by'])}: {reason}"

    def _grant(self, body: dict[str, Any]) -> str:
        folders = REDACTED if self.redact else ", ".join(self.word(f) for f in body["writable"])
        return f"writable {folders} for this command, granted by {self.prose(body['by'])}"

    def _placement(self, body: dict[str, Any]) -> str:
        prose = self.prose
        name = f" ({prose(body['hostname'])})" if body["hostname"] else ""
        return f"carried out on node {prose(body['node'])}{name}, actor {prose(body['actor'])}"

    def _result(self, body: dict[str, Any]) -> str:
        result = body["result"]
        ended = f"exit {result['exit_code']}" if result["signal"] is None else result["signal"]
        provider = self.prose(result["sandbox"]["provider"])
        text = f"{self.prose(str(ended))} in {result['duration_ms']:.1f} ms, sandbox {provider}"
        if result["timed_out"]:
            text += ", timed out"
        if not self.redact:
            sizes = (result[s]["total_bytes"] for s in ("stdout", "stderr"))
            text += ", stdout {} B, stderr {} B".format(*sizes)
        return text

    def _error(self, body: dict[str, Any]) -> str:
        message = REDACTED if self.redact else self.prose(body["message"])
        return f"{self.prose(body['code'])}: {message}"

    def _connection(self, body: dict[str, Any]) -> str:
        verdict = "allowed" if body["allowed"] else "refused"
        target = f"{body['method']} {body['host']}:{body['port']}"
        text = self.prose(f"{target} {verdict}: {body['reason']}")
        if body["allowed"]:
            text += f", {body['bytes_up']} B up, {body['bytes_down']} B down"
        return text

    def _quarantine(self, body: dict[str, Any]) -> str:
        moved, back = len(body["quarantined"]), len(body["restored"])
        text = f"after the command: {moved} quarantined, {back} restored"
        if moved and not self.redact:
            text += f", into {self.prose(body['folder'])}"
        return text

    def _decline(self, body: dict[str, Any]) -> str:
        return f"{self.prose(body['reason'])} by {self.prose(body['by'])}: it never runs"

    def _taint(self, body: dict[str, Any]) -> str:
        detail = REDACTED if self.redact else self.prose(body["detail"])
        return f"the run holds {body['taint']} ({self.prose(body['source'])}): {detail}"


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
        "detail",
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
    """Check every link, every signature, the head and every output blob; exit 0 when all
    hold, 1 naming each thing that does not; either way, say exactly what was checked."""
    from ..record.shards import verify_shards
    from ..record.verify import verify

    try:
        store = _open(args)
        try:
            verdict = verify(store)
            shards = verify_shards(store)
        finally:
            store.close()
    except StockadeError as error:
        return report_error(error, as_json=args.json)
    if args.json:
        import json

        print(json.dumps({**verdict.to_dict(), "shards": [s.to_dict() for s in shards]}, indent=2))
        return 0 if verdict.ok and all(s.ok for s in shards) else 1
    for shard in shards:  # the main chain's lines come last
        print(
            ("ok: " if shard.ok else "") + shard.checked(),
            file=sys.stdout if shard.ok else sys.stderr,
        )
        for text in shard.problems:
            print(f"  - {text}", file=sys.stderr)
    failed = sum(len(shard.problems) for shard in shards)
    if verdict.ok and failed:  # the main chain holds, a shard does not: the record does not
        print(f"main chain: {verdict.checked()}", file=sys.stderr)
        counted = f"{failed} problem{'s' if failed != 1 else ''} in its shards"
        print(f"stockade: the record does not verify: {counted}", file=sys.stderr)
    elif verdict.ok:
        print(f"ok: {verdict.checked()}")
    else:
        problems = len(verdict.problems) + verdict.more
        counted = f"{problems} problem{'s' if problems != 1 else ''}"
        print(f"stockade: the record does not verify: {counted}", file=sys.stderr)
        for problem in verdict.problems:
            print(f"  - {problem.text}", file=sys.stderr)
        if verdict.more:
            print(f"  - ... and {verdict.more} more of the same kind", file=sys.stderr)
        print(f"  checked: {verdict.checked()}", file=sys.stderr)
    return 0 if verdict.ok and all(s.ok for s in shards) else 1
