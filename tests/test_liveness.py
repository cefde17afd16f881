"""Time bounds and "nothing outlives the command", with real process trees and pid files."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from helpers import procs
from stockade.config import Config, TimeoutConfig
from stockade.executor import AbortToken
from stockade.types import ExecRequest

FULL = "danger-full-access"

# A daemon the classic way: fork, setsid, fork again, the middle one exits; the grandchild
# writes its pid and sleeps. It has left the process group and lost its parent.
DAEMON = textwrap.dedent(
    """
    import os, sys, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(sys.argv[1], "w") as f:
                f.write(str(os.getpid()))
            time.sleep(1000)
        os._exit(0)
    time.sleep(0.3)
    """
)


def _pid(path) -> int:
    assert procs.wait_until(lambda: path.exists() and path.read_text().strip(), timeout=5)
    return int(path.read_text())


def _dead(pid: int) -> bool:
    return procs.wait_until(lambda: not procs.alive(pid), timeout=3)


def test_sigterm_trapping_command_reports_timed_out_and_its_own_exit(host):
    script = 'trap "exit 0" TERM; sleep 30 & wait'
    result = host.run(ExecRequest(["sh", "-c", script], mode=FULL, timeout=0.3))
    assert result.timed_out is True
    assert result.exit_code == 0
    assert result.signal is None
    assert result.aborted is False


def test_sigterm_ignoring_command_is_killed_after_the_grace(host_with):
    host = host_with(Config(timeout=TimeoutConfig(kill_grace=0.3)))
    start = time.monotonic()
    result = host.run(ExecRequest(["sh", "-c", 'trap "" TERM; sleep 30'], mode=FULL, timeout=0.2))
    assert (result.timed_out, result.signal, result.exit_code) == (True, "SIGKILL", None)
    assert time.monotonic() - start < 5


def test_timeout_is_capped_by_config(host_with):
    host = host_with(Config(timeout=TimeoutConfig(default=0.2, max=0.3)))
    result = host.run(ExecRequest(["sleep", "5"], mode=FULL, timeout=100))
    assert result.timeout_s == 0.3
    assert result.timed_out


def test_daemonized_grandchild_is_killed(host, tmp_path, escapees):
    pidfile = tmp_path / "daemon.pid"
    result = host.run(ExecRequest([sys.executable, "-c", DAEMON, str(pidfile)], mode=FULL))
    daemon = _pid(pidfile)
    escapees.append(daemon)
    assert result.exit_code == 0
    assert _dead(daemon), f"daemon {daemon} outlived the command"


def test_background_job_in_the_group_dies_with_the_leader(host, tmp_path, escapees):
    pidfile = tmp_path / "bg.pid"
    host.run(ExecRequest(["sh", "-c", f"sleep 1000 & echo $! > {pidfile}"], mode=FULL))
    job = _pid(pidfile)
    escapees.append(job)
    assert _dead(job)


def test_daemon_escaping_on_timeout_is_killed_too(host, tmp_path, escapees):
    pidfile = tmp_path / "daemon.pid"
    code = DAEMON.replace("time.sleep(0.3)", "time.sleep(30)")
    result = host.run(ExecRequest([sys.executable, "-c", code, str(pidfile)], mode=FULL,
                                  timeout=1))
    daemon = _pid(pidfile)
    escapees.append(daemon)
    assert result.timed_out
    assert _dead(daemon)


def test_a_child_holding_the_pipe_open_does_not_hang_the_run(host):
    start = time.monotonic()
    result = host.run(ExecRequest(["sh", "-c", "setsid sleep 1000 & echo done"], mode=FULL))
    assert result.stdout.text == "done\n"
    assert time.monotonic() - start < 5


def test_abort_from_another_thread_kills_the_group(host, tmp_path, escapees):
    pidfile = tmp_path / "sleep.pid"
    token = AbortToken()
    threading.Timer(0.3, token.abort).start()
    request = ExecRequest(["sh", "-c", f"sleep 1000 & echo $! > {pidfile}; wait"], mode=FULL)
    result = host.run(request, abort=token)
    child = _pid(pidfile)
    escapees.append(child)
    assert result.aborted and not result.timed_out
    assert _dead(child)


def test_cancelling_run_async_kills_before_cancelled_error(host, tmp_path, escapees):
    pidfile = tmp_path / "sleep.pid"
    request = ExecRequest(["sh", "-c", f"echo $$ > {pidfile}; exec sleep 1000"], mode=FULL)

    async def scenario() -> int:
        task = asyncio.create_task(host.run_async(request))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return _pid(pidfile)

    leader = asyncio.run(scenario())
    escapees.append(leader)
    assert not procs.alive(leader)


HOST_SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    from stockade.host import Host
    from stockade.types import ExecRequest
    from stockade.testing import AllowAll
    host = Host(plugins=[AllowAll()])
    request = ExecRequest(["sh", "-c", "echo $$ > " + sys.argv[1] + "; exec sleep 1000"],
                          mode="danger-full-access")
    threading.Thread(target=host.run, args=(request,), daemon=True).start()
    time.sleep(1000)
    """
)


def test_host_death_kills_its_running_commands(tmp_path, escapees):
    pidfile = tmp_path / "sleep.pid"
    host = subprocess.Popen([sys.executable, "-c", HOST_SCRIPT, str(pidfile)])
    try:
        child = _pid(pidfile)
        escapees.append(child)
        assert procs.alive(child)
        os.kill(host.pid, signal.SIGKILL)
        host.wait()
        assert procs.wait_until(lambda: not procs.alive(child), timeout=5), "outlived its host"
    finally:
        host.kill()
        host.wait()
