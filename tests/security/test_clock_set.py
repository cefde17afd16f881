"""The machine's wall clock really set while a layered command runs: a person's edit made
while it was set back would be stamped before the command began. Root only (setting the
clock needs ``CAP_SYS_TIME``), and left out of the suite: it moves the clock of every
process on the machine, and a set while another test's command runs makes that one keep
its changes aside. CI runs it alone: ``STOCKADE_CLOCK_SET=1 uv run pytest
tests/security/test_clock_set.py``."""

from __future__ import annotations

import os
import time

import pytest

from stockade.config.schema import Config
from stockade.layers import clock
from stockade.testing import EventLog

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="setting the clock is root's")
BACK_NS = 500_000_000


def _step(ns: int) -> None:
    time.clock_settime_ns(time.CLOCK_REALTIME, time.clock_gettime_ns(time.CLOCK_REALTIME) + ns)


def test_the_watch_sees_the_clock_set_by_the_smallest_step():
    watch = clock.Watch()
    assert not watch.was_set()  # the control
    _step(0)  # set to the time it already is: a set all the same
    assert watch.was_set() and watch.was_set()  # said once by the kernel, kept
    watch.close()


@pytest.mark.sandboxes("bubblewrap")
@pytest.mark.parametrize("watched", [True, False], ids=["watched", "control-unwatched"])
def test_an_edit_made_while_the_clock_was_set_back_is_not_overwritten(
    box, make_host, sandbox, monkeypatch, watched
):
    """The clock set back half a second, a person's edit, the clock set forward again (no
    net change: only the watch can tell). Unwatched, the command's version lands over the
    edit: the control shows the test sees the loss."""
    shared = box.ws / "shared.txt"
    shared.write_text("original")
    time.sleep(0.05)
    if not watched:
        monkeypatch.setattr(clock.Watch, "was_set", lambda _self: False)
    log = EventLog()
    host = make_host(allow_all=True, config=Config(sandbox=sandbox), plugins=[log])
    source = (
        "import time\nprint('started', flush=True)\ntime.sleep(1)\n"
        "open('shared.txt', 'w').write('mine')"
    )
    info = host.start(box.py(source), owner="me")
    deadline = time.monotonic() + 20
    while "started" not in host.read_output(info.task_id, owner="me").stdout:
        assert time.monotonic() < deadline, "the task never started"
        time.sleep(0.02)
    time.sleep(0.05)
    _step(-BACK_NS)
    try:
        shared.write_text("a person's")
        stamped = os.stat(shared).st_ctime_ns
    finally:
        _step(BACK_NS)
    while (done := host.list_tasks(owner="me")[0]).status == "running":
        assert time.monotonic() < deadline, "the task never ended"
        time.sleep(0.05)
    result = done.result
    assert result is not None and result.landed == "landed", done.error
    assert stamped < time.time_ns() - BACK_NS // 2  # the edit's stamp is from the past
    if not watched:
        assert shared.read_text() == "mine" and not result.conflicts  # the loss
        return
    assert shared.read_text() == "a person's"
    assert result.conflicts == (str(shared),)
    [kept] = [e for e in log.events if e.kind == "quarantine"]
    assert any("the system clock was set" in f for f in kept.failed), kept.failed
