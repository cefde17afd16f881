"""The short texts a model reads (and a client may show a person): a result's status and
the head and tail of its output.

Every text here goes through :mod:`stockade.display`: argv and names as shell words, other
text with control, bidirectional and invisible characters escaped (newlines and tabs
kept). The structured results stay exact.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from stockade.display import command, quote, visible

if TYPE_CHECKING:
    from stockade.errors import StockadeError
    from stockade.request.result import CollectedOutput, RunResult
    from stockade.run.tasks import TaskInfo, TaskOutput
    from stockade.workspace.file_types import Entry

OUTPUT_KEEP = "\n\t"
"""What output keeps as it is; every other hidden character is shown as an escape."""
HEAD = 4096
"""Characters of each stream shown from its start."""
TAIL = 4096
"""Characters of each stream shown from its end."""


def bounded(text: str, *, head: int = HEAD, tail: int = TAIL) -> tuple[str, int]:
    """``text`` cut to its first ``head`` and last ``tail`` characters; how many were cut."""
    if len(text) <= head + tail:
        return text, 0
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters not shown ...]\n{text[-tail:]}", cut


def status(result: RunResult) -> str:
    """How the command ended, in a few words."""
    if result.limit_hit == "quota":
        how = "stopped: the workspace went over its quota"
    elif result.aborted:
        how = "killed: the run was cancelled"
    elif result.timed_out:
        how = f"timed out after {result.timeout_s:g} s and was killed"
    elif result.signal is not None:
        how = f"killed by signal {result.signal}"
    else:
        how = f"exit status {result.exit_code}"
    if result.limit_hit not in (None, "quota"):
        how += f" (likely the {result.limit_hit} limit)"
    landed = LANDED.get(result.landed or "")
    where = f"{how}; {result.duration_ms:.0f} ms, sandbox {result.sandbox.provider}"
    return f"{where}; {landed}" if landed else where


LANDED = {
    "discarded": "its writes were not kept (a dry run, or commit = on-success)",
    "over-quota": "its writes were not kept: over the workspace's quota",
    "waiting": "its writes wait for a person before they reach the folder",
    "refused": "a person refused its writes: none reached the folder",
}
"""What the status says of writes that did not reach the folder (``RunResult.landed``)."""


def reader(name: str, **which: str) -> str:
    """The ``read_output`` call that reads stream ``name`` whole (by task or action id)."""
    return "read_output " + json.dumps({**which, "stream": name, "offset": 0})


def _stream(name: str, output: CollectedOutput, action_id: str) -> list[str]:
    if not output.text and not output.truncated:
        return []
    text, cut = bounded(visible(output.text, keep=OUTPUT_KEEP))
    lines = [f"--- {name} ({output.total_bytes} bytes) ---", text.rstrip("\n")]
    if output.truncated or cut:
        how = "was truncated" if output.truncated else "is shortened here"
        lines.append(f"[{name} {how}; read all of it with {reader(name, action_id=action_id)}]")
    return lines


def result_text(result: RunResult) -> str:
    """The status, then the head and tail of stdout and stderr."""
    return "\n".join(
        [
            status(result),
            *_stream("stdout", result.stdout, result.action_id),
            *_stream("stderr", result.stderr, result.action_id),
        ]
    )


def error_text(error: StockadeError) -> str:
    """The message and the hint of ``error``, marked with its code."""
    from stockade.errors import PolicyDenied

    lead = "denied, it did not run" if isinstance(error, PolicyDenied) else error.code
    text = f"stockade: {lead}: {visible(error.message)}"
    return f"{text}\nhint: {visible(error.hint)}" if error.hint else text


def task_line(info: TaskInfo) -> str:
    """One line for a task: id, status, how it ended, argv."""
    how: str = info.status
    if info.status != "running":
        if info.signal is not None:
            how += f", signal {info.signal}"
        elif info.exit_code is not None:
            how += f", exit status {info.exit_code}"
        if info.error:
            how += f", {info.error.get('code')}: {info.error.get('message')}"
    return f"{visible(info.task_id)} ({visible(how)}): {command(info.argv)}"


def entry_line(entry: Entry) -> str:
    """One line of a folder listing: kind, size and the name as a shell word."""
    return f"{visible(entry.kind):<8} {entry.size:>12}  {quote(entry.name)}"


def output_text(output: TaskOutput) -> str:
    """A task's status and what it printed since the previous read."""
    lines = [task_line(output.info)]
    if output.lossy:
        lines.append(
            f"[{output.dropped_bytes} bytes were dropped unread: it printed faster than it was "
            "read]"
        )
    for name in ("stdout", "stderr"):
        text: str = getattr(output, name)
        if text:
            shown, cut = bounded(visible(text, keep=OUTPUT_KEEP))
            lines += [f"--- {name} since the previous read ---", shown.rstrip("\n")]
            if cut:
                lines.append(
                    f"[{name} is shortened here; once the task ended, read all of it with "
                    f"{reader(name, task_id=output.task_id)}]"
                )
    for name, path in output.spill.items():
        if path:
            whole = reader(name, task_id=output.task_id)
            lines.append(f"[{name} was truncated; read all of it with {whole}]")
    if output.status == "running" and len(lines) == 1:
        lines.append("(nothing new yet)")
    return "\n".join(lines)


def jsonable(value: Any) -> Any:  # noqa: ANN401 - JSON-ready data of any shape
    """``value`` as plain JSON data (anything JSON cannot hold becomes its text)."""
    return json.loads(json.dumps(value, default=str))
