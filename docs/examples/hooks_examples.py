"""Example implementations of the classifier-rules, approval, credential and recorder hooks.

Each is a class, so one plugin object carries its own state; register an instance (an entry
point may name a module-level instance: ``broker = "my_pkg.plugin:BROKER"``). Tested by
tests/test_docs_hooks.py.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence

from stockade import hookimpl
from stockade.record.events import Event
from stockade.request.literals import ClassifierRule, Kind, Verdict
from stockade.request.result import PendingApproval
from stockade.request.spec import ExecSpec
from stockade.request.verdict import Decision
from stockade.request.wire import to_json


# --8<-- [start:classifier_rules]
class SystemctlRules:
    """Teaches the built-in classifier ``systemctl``: what only looks, and what acts."""

    LOOKS = frozenset(
        {"status", "show", "cat", "is-active", "is-enabled", "is-failed", "list-units"}
    )

    @hookimpl
    def stockade_classifier_rules(self) -> dict[str, ClassifierRule]:
        """One rule, for the program ``systemctl``."""
        return {"systemctl": self.systemctl}

    def systemctl(self, args: Sequence[str]) -> tuple[Kind, str]:
        """The class of ``systemctl ARGS``; anything it does not know acts on the system."""
        if any(a in ("-H", "--host") or a.startswith("--host=") for a in args):
            return "network", "systemctl --host reaches another machine over ssh"
        sub = next((a for a in args if not a.startswith("-")), "list-units")
        if sub in self.LOOKS:
            return "reads", f"systemctl {sub} only shows units"
        return "destroys", f"systemctl {sub} changes the system's services"


# --8<-- [end:classifier_rules]


# --8<-- [start:ask]
class CallbackApprover:
    """Asks a person through a function you supply (a chat message, a web form, ...).

    The function gets the held command and returns ``True`` (run it), ``False`` (refuse) or
    ``None`` (nobody answered: the next approver is asked, and the command stays held).
    """

    def __init__(self, ask_person: Callable[[PendingApproval], bool | None]) -> None:
        self.ask_person = ask_person

    @hookimpl
    def stockade_ask(self, pending: PendingApproval) -> Decision | None:
        """The person's answer, or ``None`` when there was none."""
        answer = self.ask_person(pending)
        if answer is None:
            return None
        verdict: Verdict = "allow" if answer else "deny"
        return Decision(verdict, f"a person answered: {pending.decision.reason}", by="person")


# --8<-- [end:ask]


# --8<-- [start:resolve_credential]
class FileBroker:
    """Resolves handles ``file:/absolute/path`` to the first line of that file."""

    PREFIX = "file:"

    @hookimpl
    def stockade_resolve_credential(self, handle: str, spec: ExecSpec) -> str | None:
        """The file's first line; ``None`` for other handles, so another broker may try."""
        if not handle.startswith(self.PREFIX):
            return None
        path = handle.removeprefix(self.PREFIX)
        if not os.path.isabs(path):
            return None
        with open(path, encoding="utf-8") as secret:
            return secret.readline().rstrip("\n")


# --8<-- [end:resolve_credential]


# --8<-- [start:record]
class JsonLinesRecorder:
    """Appends every event to a file as one JSON object per line."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()  # hosts may run commands from many threads

    @hookimpl
    def stockade_record(self, event: Event) -> None:
        """Append ``event``; an error here stops a command that has not run yet."""
        line = to_json(event) + "\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as log:
            log.write(line)


# --8<-- [end:record]


# --8<-- [start:record_batch]
class JsonLinesBatchRecorder(JsonLinesRecorder):
    """As above, with each batch written in one ``write`` call."""

    @hookimpl
    def stockade_record_batch(self, events: Sequence[Event]) -> None:
        """Append ``events`` at once; an error here stops a command that has not run yet."""
        lines = "".join(to_json(event) + "\n" for event in events)
        with self._lock, open(self.path, "a", encoding="utf-8") as log:
            log.write(lines)


# --8<-- [end:record_batch]
