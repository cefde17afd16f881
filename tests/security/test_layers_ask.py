"""``commit = "ask"``: a command's writes land only when a person lets them.

The person is asked through the ``stockade_ask`` hook with the change list (what would be
created, changed, deleted, withheld as protected, kept aside as a conflict); while nobody has
answered, nothing of it is in the real folder, and a protected name never is. Their answer is
recorded as a ``layer`` event naming them. With nobody to ask, the layers wait, through a
host's death, for ``stockade land`` (or ``--refuse``); an answer is taken once.
"""

from __future__ import annotations

import os
import time

import attrs
import pytest

from stockade import hookimpl
from stockade.cli.commands import main
from stockade.config.schema import Config, store_folder
from stockade.errors import SandboxUnavailable
from stockade.layers import journal, waiting
from stockade.request.spec import Profile
from stockade.request.verdict import Decision
from stockade.testing import EventLog

WORK = (
    "import os\nopen('new.txt', 'w').write('n')\nopen('old.txt', 'w').write('changed')\n"
    "os.remove('gone.txt')\nos.makedirs('.vscode')\nopen('.vscode/tasks.json', 'w').write('{}')"
)


class Person:
    """An approver who answers every question with ``verdict``, and keeps what it saw."""

    def __init__(self, verdict: str) -> None:
        self.verdict = verdict
        self.seen: list = []

    @hookimpl
    def stockade_ask(self, pending):
        self.seen.append(pending)
        return Decision(self.verdict, "looked at the list", by="a person")


def _host(box, make_host, sandbox, *plugins):
    agent = Profile(name="bot", workspace=str(box.ws), commit="ask")
    config = Config(sandbox=sandbox, agents={"bot": agent})
    return make_host(allow_all=True, config=config, plugins=plugins), config


def _seed(box):
    (box.ws / "old.txt").write_text("old")
    (box.ws / "gone.txt").write_text("g")
    time.sleep(0.05)  # older than a clock tick before the command: not a rival change


def _untouched(box):
    assert (box.ws / "old.txt").read_text() == "old" and (box.ws / "gone.txt").exists()
    assert not (box.ws / "new.txt").exists() and not (box.ws / ".vscode").exists()


@pytest.mark.sandboxes("bubblewrap")
def test_a_person_sees_the_list_and_lets_it_land(box, make_host, sandbox):
    _seed(box)
    person, log = Person("allow"), EventLog()
    host, _ = _host(box, make_host, sandbox, person, log)
    result = host.run(box.py(WORK, profile="bot"))
    assert result.ok and result.landed == "landed", result.stderr.text
    (pending,) = person.seen  # asked once: about the landing (AllowAll admitted the command)
    assert pending.changes is not None and pending.decision.by == "commit"
    assert pending.changes.created == ("new.txt",)
    assert pending.changes.modified == ("old.txt",)
    assert pending.changes.deleted == ("gone.txt",)
    assert pending.changes.withheld == (str(box.ws / ".vscode") + "/",)
    assert (box.ws / "new.txt").read_text() == "n" and (box.ws / "old.txt").read_text() == "changed"
    assert not (box.ws / "gone.txt").exists() and not (box.ws / ".vscode").exists()
    assert result.quarantined == (str(box.ws / ".vscode"),)
    (event,) = [e for e in log.events if e.kind == "layer"]
    assert (event.action_id, event.outcome, event.by) == (result.action_id, "landed", "a person")
    assert str(box.ws / "new.txt") in event.changed
    assert waiting.entries(store_folder(host.config)) == []


@pytest.mark.sandboxes("bubblewrap")
def test_a_person_refuses_and_nothing_lands(box, make_host, sandbox):
    _seed(box)
    person, log = Person("deny"), EventLog()
    host, _ = _host(box, make_host, sandbox, person, log)
    result = host.run(box.py(WORK, profile="bot"))
    assert result.landed == "refused" and len(person.seen) == 1
    _untouched(box)
    (event,) = [e for e in log.events if e.kind == "layer"]
    assert (event.outcome, event.by, event.changed) == ("refused", "a person", ())
    store = store_folder(host.config)
    assert waiting.entries(store) == [] and os.listdir(os.path.join(store, "layers")) == ["journal"]


@pytest.mark.sandboxes("bubblewrap")
def test_nobody_to_ask_the_writes_wait_for_stockade_land(box, make_host, sandbox, capsys):
    _seed(box)
    host, _ = _host(box, make_host, sandbox)  # no approver reaches anyone (an api request)
    result = host.run(box.py(WORK, profile="bot"))
    assert result.landed == "waiting", result.stderr.text
    _untouched(box)  # nothing of it is in the real folder while it waits
    assert result.changes is not None and result.changes.withheld
    store = store_folder(host.config)
    (entry,) = waiting.entries(store)
    # Its host died: a starting host finishes or discards layers of dead hosts, never these.
    dead = attrs.evolve(entry, pid=2**22 + 1, started=1)
    journal.write(store, dead)
    journal.recover(store)
    assert [e.action_id for e in waiting.entries(store)] == [result.action_id]
    _untouched(box)
    assert main(["--no-server", "pending"]) == 0
    assert "1 command(s) ran and wait to land: `stockade land`" in capsys.readouterr().err
    assert main(["--no-server", "land"]) == 0
    listed = capsys.readouterr().out
    assert result.action_id in listed and "new.txt" in listed and "withhold:" in listed
    assert main(["--no-server", "land", result.action_id]) == 0
    assert (box.ws / "new.txt").read_text() == "n" and not (box.ws / "gone.txt").exists()
    assert not (box.ws / ".vscode").exists()  # a protected name never lands, answered or not
    assert main(["--no-server", "land", "--refuse", result.action_id]) != 0  # taken once
    assert "no landing waits" in capsys.readouterr().err


@pytest.mark.sandboxes("bubblewrap")
def test_stockade_land_refuse_discards_and_records_who(box, make_host, sandbox, capsys):
    _seed(box)
    host, _ = _host(box, make_host, sandbox)
    result = host.run(box.py(WORK, profile="bot"))
    assert result.landed == "waiting"
    assert main(["--no-server", "land", "--refuse", "--json", result.action_id]) == 0
    assert '"outcome": "refused"' in capsys.readouterr().out
    _untouched(box)
    assert waiting.entries(store_folder(host.config)) == []
    assert main(["--no-server", "land", "../../etc/x"]) != 0  # only an action id names one


@pytest.mark.sandboxes("bubblewrap")
def test_nothing_written_asks_nobody(box, make_host, sandbox):
    person = Person("deny")
    host, _ = _host(box, make_host, sandbox, person)
    result = host.run(box.py("print('read only')", profile="bot"))
    assert result.ok and result.landed == "landed" and person.seen == []


@pytest.mark.sandboxes("landlock")
def test_ask_is_refused_where_writes_are_direct(box, make_host, sandbox):
    _seed(box)
    person = Person("allow")
    host, _ = _host(box, make_host, sandbox, person)
    with pytest.raises(SandboxUnavailable, match="commit = ask needs layers"):
        host.run(box.py(WORK, profile="bot"))
    _untouched(box)  # it never ran: nothing landed unasked
    assert person.seen == []


@pytest.mark.sandboxes("bubblewrap")
def test_the_terminal_question_lists_the_changes_as_a_person_reads_them(
    box, make_host, sandbox, monkeypatch
):
    from stockade.policy import prompt

    asked: list[str] = []
    answers = iter(["y", "n"])

    def at_terminal(question):
        asked.append(question)
        return next(answers)

    monkeypatch.setattr(prompt, "_ask", at_terminal)
    host, _ = _host(box, make_host, sandbox)
    hostile = "evil\x1b]0;owned\x07.txt"  # a name that would rewrite the terminal's title
    source = f"open({hostile!r}, 'w').write('x')\nopen('new.txt', 'w').write('n')"
    landed = host.run(box.py(source, profile="bot", origin="cli"))
    assert landed.landed == "landed" and (box.ws / "new.txt").exists()
    question = asked[0]
    assert question.endswith("land them? [y/N] ") and "\x1b" not in question
    assert "create:     new.txt" in question
    assert "create:     evil$'\\x1b'']0;owned'$'\\x07'.txt" in question
    refused = host.run(box.py("open('other.txt', 'w').write('o')", profile="bot", origin="cli"))
    assert refused.landed == "refused" and not (box.ws / "other.txt").exists()
