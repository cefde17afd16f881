"""The built-in approver: a person at the terminal answers for a command typed at the CLI.

It asks only when the command came from the CLI and the CLI has a terminal (its stdin is
one and ``/dev/tty`` opens): it shows exactly what would run, where, in which mode, the
class and every reason, then reads one answer. What it shows goes through
:mod:`stockade.display`: argv as shell words, hidden characters as escapes, so the command
cannot rewrite the prompt or look like another one. Only ``y`` or ``yes`` approves. Anything
else — including no terminal — is not an answer it can give: it returns ``None`` and the
host holds the step for ``stockade approve``.
"""

from __future__ import annotations

import os
import sys

from .. import hookimpl
from ..display import command, quote, visible
from ..request.result import Changes, PendingApproval
from ..request.verdict import Decision

NAME = "builtin-tty-approval"
LONG = 400
SHOWN = 200
"""The most paths a question about a landing lists (the rest are counted)."""
"""A command shown longer than this is named again at the end of the question."""


def describe(pending: PendingApproval) -> str:
    """What a person is asked about: the command, where and how it runs, and why it asks.

    Every text in it is shown through :mod:`stockade.display`: the argv and paths as shell
    words, the rest with hidden characters escaped; it holds no control character but the
    newlines between its lines.
    """
    spec, classification = pending.spec, pending.classification
    sandbox = visible(spec.sandbox)
    shown = command(spec.argv)
    lines = [
        f"  run:    {shown}",
        f"  in:     {quote(spec.cwd)}  (mode {visible(spec.mode)}, sandbox {sandbox})",
        *(
            f"  {'script:' if i == 0 else '       '} {visible(part)}"
            for i, part in enumerate(classification.parts)
        ),
        f"  class:  {visible(classification.kind)}",
        *(f"          - {visible(reason)}" for reason in classification.reasons),
        f"  asks:   {visible(pending.decision.reason)}",
    ]
    if spec.grant_writable:
        folders = ", ".join(quote(folder) for folder in spec.grant_writable)
        lines.append(f"  grant:  writable for this command only: {folders}")
    if spec.run_id:
        lines.append(f"  step:   {visible(spec.run_id)} {spec.step}")
    if pending.changes is not None:
        lines += change_lines(pending.changes)
    if len(shown) > LONG:  # its head may have scrolled away: name the program near the question
        lines.append(
            f"  long:   {quote(spec.argv[0])} with {len(spec.argv) - 1} arguments, {len(shown)} "
            "characters: read the whole run: line above"
        )
    return "\n".join(lines)


def change_lines(changes: Changes, most: int = SHOWN) -> list[str]:
    """What landing a layer would do, a line a path (at most ``most``, then how many in
    all): created, modified, deleted, withheld (protected names: to the quarantine) and
    kept aside (changed in the real folder since the command started)."""
    rows = [
        *(("create", path) for path in changes.created),
        *(("modify", path) for path in changes.modified),
        *(("delete", path) for path in changes.deleted),
        *(("withhold", path) for path in changes.withheld),
        *(("keep aside", path) for path in changes.conflicts),
    ]
    lines = [f"  {verb + ':':11} {quote(path)}" for verb, path in rows[:most]]
    shown = min(len(rows), most)
    total = changes.total + len(changes.withheld) + len(changes.conflicts)
    if total > shown:
        lines.append(f"  ... {total - shown} more, {total} in all (`stockade land` lists them)")
    if not rows:
        lines.append("  changes: none listed")
    if changes.withheld:
        lines.append("  (withhold: protected names; they go to the quarantine, never land)")
    if changes.conflicts:
        lines.append("  (keep aside: changed in the folder since it started; its version is kept)")
    return lines


@hookimpl(trylast=True)
def stockade_ask(pending: PendingApproval) -> Decision | None:
    """Prompt at the terminal for a CLI command; ``None`` when there is no terminal."""
    if pending.spec.origin != "cli":
        return None
    if pending.changes is not None:  # the command ran: its writes wait to land
        head = "stockade: this command ran; its writes land only if you let them"
        question, verb = f"{head}\n{describe(pending)}\n", "land them"
    else:
        question, verb = (
            f"stockade: this command waits for your approval\n{describe(pending)}\n",
            "approve",
        )
    answer = _ask(f"{question}{verb}? [y/N] ")
    if answer is None:
        return None
    answer = answer.strip().lower()
    user = f"{user_name()} (terminal)"
    if answer in ("y", "yes"):
        return Decision("allow", f"approved at the terminal: {pending.decision.reason}", by=user)
    return Decision("deny", f"declined at the terminal ({answer or 'no answer'})", by=user)


def _ask(question: str) -> str | None:
    """The line typed after ``question`` at the terminal of whoever ran the command: this
    process's, or a server's caller's; ``None`` when there is none."""
    from ..caller import current
    from ..terminal import ask_terminal

    caller = current()
    if caller is not None:
        return None if caller.ask is None else caller.ask(question)
    if not _interactive():
        return None
    return ask_terminal(question)


def _interactive() -> bool:
    try:
        return os.isatty(sys.stdin.fileno())
    except (AttributeError, OSError, ValueError):
        return False


def user_name() -> str:
    """Who this process runs as, for the record of who answered or acted."""
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid {os.getuid()}"
