"""Warm hosts are evicted: past ``keep`` the least recently used, and any unused for ``idle``
seconds, never one a call is using nor one holding a kept run; what a host holds (its
store, executor, recorder) is closed with it. Then the same bound through a real server.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.server import FULL, Stockade, stockade_for
from stockade.host import Host
from stockade.request.spec import ExecRequest
from stockade.server import warm as warm_module
from stockade.server.warm import WarmHosts


@pytest.fixture
def closed(monkeypatch: pytest.MonkeyPatch) -> list[Host]:
    """Every warm host closed (not the runs lent from them), in order."""
    found: list[Host] = []
    close = Host.close

    def spy(self: Host) -> None:
        if self._warm is None and not self.kept:
            found.append(self)
        close(self)

    monkeypatch.setattr(Host, "close", spy)
    return found


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(warm_module.time, "monotonic", lambda: now[0])
    return now


def environ(tmp_path: Path, which: int) -> dict[str, str]:
    """An environment of its own (so a warm host of its own), one state folder for all."""
    return {
        "PATH": os.environ["PATH"],
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": "/nonexistent",
        "STOCKADE_DISABLE_PLUGINS": "bubblewrap,landlock",
        "WHICH": str(which),
    }


def use(hosts: WarmHosts, env: dict[str, str], cwd: Path, run: str | None = None) -> Host:
    """One call's use of a warm host: a run from it, closed, then released. The warm host."""
    holds: list[warm_module._Warm] = []
    lent = hosts.host(None, env, str(cwd), run, holds=holds)
    warm = holds[0].host
    lent.close()
    hosts.release(holds)
    return warm


def test_past_keep_the_least_recently_used_goes(tmp_path: Path, closed: list[Host], clock) -> None:
    hosts = WarmHosts(keep=2)
    try:
        first, second = (use(hosts, environ(tmp_path, i), tmp_path) for i in range(2))
        clock[0] += 1
        assert use(hosts, environ(tmp_path, 0), tmp_path) is first  # used again: now the newest
        clock[0] += 1
        third = use(hosts, environ(tmp_path, 2), tmp_path)
        assert closed == [second]
        assert hosts.hosts() == [first, third]
    finally:
        hosts.close()


def test_a_host_in_use_is_never_closed(tmp_path: Path, closed: list[Host], clock) -> None:
    hosts = WarmHosts(keep=1, idle=0.0)
    try:
        holds: list[warm_module._Warm] = []
        lent = hosts.host(None, environ(tmp_path, 0), str(tmp_path), holds=holds)
        busy = holds[0].host
        clock[0] += 1
        others = [use(hosts, environ(tmp_path, i), tmp_path) for i in (1, 2)]
        clock[0] += 1
        hosts.sweep()
        assert busy not in closed  # over the bound and idle, but a call is using it
        assert closed == others
        assert lent.run(ExecRequest(["true"], mode=FULL)).exit_code == 0  # it still works
        lent.close()
        hosts.release(holds)
        clock[0] += 1
        hosts.sweep()
        assert closed == [*others, busy]
        assert hosts.hosts() == []
    finally:
        hosts.close()


def test_idle_hosts_are_closed_with_what_they_hold(
    tmp_path: Path, closed: list[Host], clock
) -> None:
    hosts = WarmHosts(idle=300.0)
    try:
        holds: list[warm_module._Warm] = []
        lent = hosts.host(None, environ(tmp_path, 0), str(tmp_path), holds=holds)
        assert lent.run(ExecRequest(["true"], mode=FULL)).exit_code == 0
        warm = holds[0].host
        store = lent.store  # the warm host's, opened by a call
        assert warm._store is store
        lent.close()
        hosts.release(holds)
        clock[0] += 299
        assert hosts.sweep() == 1
        clock[0] += 2
        assert hosts.sweep() == 0
        assert closed == [warm]
        assert warm._store is None
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            store.connection.execute("SELECT 1")
    finally:
        hosts.close()


def test_a_host_holding_a_kept_run_stays(tmp_path: Path, closed: list[Host], clock) -> None:
    hosts = WarmHosts(keep=1, idle=0.0)
    try:
        pinned = use(hosts, environ(tmp_path, 0), tmp_path, run="spans-calls")
        clock[0] += 1
        other = use(hosts, environ(tmp_path, 1), tmp_path)
        clock[0] += 1
        hosts.sweep()
        assert closed == [other]
        assert hosts.hosts() == [pinned]
    finally:
        hosts.close()
    assert pinned in closed  # the server's end closes it


@pytest.fixture
def sk(tmp_path: Path) -> Iterator[Stockade]:
    with stockade_for(tmp_path) as found:
        yield found


def test_through_the_server_warm_hosts_stay_bounded(sk: Stockade) -> None:
    for which in range(warm_module.KEEP + 3):  # each environment makes a warm host
        done = sk.run("run", "--yes", "--mode", FULL, "--", "true", env={"WHICH": str(which)})
        assert done.returncode == 0, done.stderr
    status = json.loads(sk.run("serve", "--status", "--json", server=False).stdout)
    assert status["calls_served"] == warm_module.KEEP + 3
    assert status["warm_hosts"] == warm_module.KEEP
