"""A landing that raises something other than ``OSError`` (a ``RecursionError`` on a tree
no walk foresaw, a ``ValueError`` from a name) is said in the result and the record, and
the rest of the layer stays out; the run still ends with its result, and a landing that
waited for a person ends with the person's answer recorded. Before, only ``OSError`` was
caught: the exception left the host's run with the command's result unrecorded (the
control raises the same fault where nothing catches it)."""

from __future__ import annotations

import pytest

from stockade.config.schema import Config, store_folder
from stockade.layers import session, waiting
from stockade.request.spec import Profile
from stockade.testing import EventLog

WORK = "open('new.txt', 'w').write('n')"


def _fault(monkeypatch, module, kind: type[Exception]) -> None:
    def land(layer, rules, tally):
        raise kind("a fault in the landing")

    monkeypatch.setattr(module, "land", land)


@pytest.mark.sandboxes("bubblewrap")
@pytest.mark.parametrize("kind", [RecursionError, ValueError])
def test_a_landing_that_raises_is_said_and_the_run_ends(box, make_host, sandbox, monkeypatch, kind):
    log = EventLog()
    host = make_host(allow_all=True, config=Config(sandbox=sandbox), plugins=[log])
    _fault(monkeypatch, session, kind)
    result = host.run(box.py(WORK))
    assert result.exit_code == 0 and result.landed == "landed", result.stderr.text
    assert not (box.ws / "new.txt").exists()  # the rest of the layer stays out
    [kept] = [e for e in log.events if e.kind == "quarantine"]
    assert any(f"{kind.__name__}: a fault in the landing" in f for f in kept.failed), kept.failed
    assert [e.kind for e in log.events][-1] == "result"  # the run's result is recorded
    with pytest.raises(kind):  # the control: the fault itself raises
        session.land(None, None, None)


@pytest.mark.sandboxes("bubblewrap")
def test_a_waiting_landing_that_raises_is_said_and_answered(box, make_host, sandbox, monkeypatch):
    agent = Profile(name="bot", workspace=str(box.ws), commit="ask")
    config = Config(sandbox=sandbox, agents={"bot": agent})
    host = make_host(allow_all=True, config=config)  # nobody to ask: the writes wait
    result = host.run(box.py(WORK, profile="bot"))
    assert result.landed == "waiting", result.stderr.text
    store = store_folder(host.config)
    _fault(monkeypatch, waiting, RecursionError)
    event, _tally = waiting.settle(store, result.action_id, land_it=True, by="a person")
    assert event.outcome == "landed" and event.by == "a person"
    assert any("RecursionError: a fault in the landing" in f for f in event.failed), event.failed
    assert not (box.ws / "new.txt").exists() and waiting.entries(store) == []
