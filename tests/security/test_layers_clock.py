"""The conflict check when the wall clock is set (:func:`stockade.layers.clock.settled`).

A person's edit made while a command runs is stamped by the wall clock; set back, it
stamps the edit before the layers began and the command's version would land over it.
Here without touching the machine's clock: the settling itself, and a layered run whose
clocks are made to disagree at its landing (the control: the same run, clocks agreeing,
lands the person's older edit as no conflict). The real clock set while a command runs:
``test_clock_set.py``, run alone (it moves the machine's clock)."""

from __future__ import annotations

import time

import attrs
import pytest

from stockade.config.schema import Config
from stockade.layers import clock
from stockade.layers.commit import Rules
from stockade.record.live import boot_id
from stockade.testing import EventLog

SECOND = 1_000_000_000


def _rules() -> Rules:
    return attrs.evolve(Rules("/q"), since=time.time_ns(), offset=clock.offset(), boot=boot_id())


def test_clocks_that_agree_change_nothing():
    rules = _rules()
    assert clock.settled(rules) == (rules, None)
    watch = clock.Watch()  # nothing sets the clock here
    assert clock.settled(rules, watch) == (rules, None)
    watch.close()
    assert not watch.was_set()


def test_a_clock_set_back_moves_the_beginning_back_as_far():
    rules = attrs.evolve(_rules(), offset=clock.offset() + 3 * SECOND)  # 3 s ahead then
    settled, why = clock.settled(rules)
    assert abs(settled.since - (rules.since - 3 * SECOND)) < 1_000_000  # two clock reads apart
    assert why is not None and "set back 3.0" in why


def test_a_clock_set_forward_changes_nothing():
    rules = attrs.evolve(_rules(), offset=clock.offset() - 3 * SECOND)
    assert clock.settled(rules) == (rules, None)


def test_another_boot_makes_every_path_changed_by_both_a_conflict():
    rules = attrs.evolve(_rules(), boot="another-boot")
    settled, why = clock.settled(rules)
    assert settled.since == clock.EVERY
    assert why is not None and "restarted" in why


def test_rules_without_the_clocks_or_the_check_are_left_as_they_are():
    assert clock.settled(Rules("/q")) == (Rules("/q"), None)  # no conflict check
    old = attrs.evolve(Rules("/q"), since=time.time_ns())  # a journal from before
    assert clock.settled(old) == (old, None)
    assert boot_id() == boot_id() != ""


@pytest.mark.sandboxes("bubblewrap")
@pytest.mark.parametrize("set_back", [False, True], ids=["control", "set-back"])
def test_a_landing_after_the_clock_was_set_back_keeps_an_older_stamp_aside(
    box, make_host, sandbox, monkeypatch, set_back
):
    """A person's edit made just before the run is no conflict (the control); the same
    edit when the clock was set back 3 s during the run could have been made during it,
    and the command's version is kept aside."""
    shared = box.ws / "shared.txt"
    shared.write_text("a person's")
    time.sleep(0.05)  # older than the run by more than a clock tick
    log = EventLog()
    host = make_host(allow_all=True, config=Config(sandbox=sandbox), plugins=[log])
    if set_back:
        real = clock.offset
        monkeypatch.setattr(clock, "offset", lambda: real() - 3 * SECOND, raising=True)
        began = clock.kept
        monkeypatch.setattr(  # the rules keep the real offset: the landing reads 3 s less
            clock, "kept", lambda rules, folders: attrs.evolve(began(rules, folders), offset=real())
        )
    result = host.run(box.py("open('shared.txt', 'w').write('mine')"))
    assert result.landed == "landed", result.stderr.text
    if not set_back:
        assert not result.conflicts and shared.read_text() == "mine"
        return
    assert result.conflicts == (str(shared),)
    assert shared.read_text() == "a person's"
    [kept] = [e for e in log.events if e.kind == "quarantine"]
    assert any("set back 3.0" in f for f in kept.failed), kept.failed
