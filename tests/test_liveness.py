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
from stockade.config.schema import Config, TimeoutConfig
from stockade.request.spec import ExecRequest
from stockade.run.executor import AbortToken

FULL = "danger-full-access"

# A daemon the classic way: fork, setsid, fork again, the middle one exits; the grandchild
# writes its pid and sleeps. It has left the process group and lost its parent. The leader
# reaps the middle one, waits for the pid file, then lingers for argv[2] seconds.
DAEMON = textwrap.dedent(
    """
    import os, sys, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(sys.argv[1] + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(sys.argv[1] + ".tmp", sys.argv[1])
            time.sleep(1000)
        os._exit(0)
    os.wait()
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.005)
    time.sleep(float(sys.argv[2]))
    """
)


def _daemon(pidfile, linger: float = 0.0) -> list[str]:
    return [sys.executable, "-c", DAEMON, str(pidfile), str(linger)]


def _pid(path) -> int:
    assert procs.wait_until(lambda: path.exists() and path.read_text().strip(), timeout=30)
    return int(path.read_text())


def _dead(pid: int) -> bool:
    return procs.wait_until(lambda: not procs.alive(pid), timeout=30)


def test_sigterm_trapping_command_reports_timed_out_and_its_own_exit(host):
    script = 'trap "exit 0" TERM; sleep 30 & wait'
    result = host.run(ExecRequest(["sh", "-c", script], mode=FULL, timeout=0.3))
    assert result.timed_out is True
    assert result.exit_code == 0
    assert result.signal is None
    assert result.aborted is False
    assert result.ok is False  # exit 0, but only because the timeout made it exit
    assert result.timeout_s == 0.3
    assert 300 <= result.duration_ms < 300 + 1500  # exited on SIGTERM, not after the grace


def test_sigterm_ignoring_command_is_killed_after_the_grace(host_with):
    host = host_with(Config(timeout=TimeoutConfig(kill_grace=0.3)))
    start = time.monotonic()
    result = host.run(ExecRequest(["sh", "-c", 'trap "" TERM; sleep 30'], mode=FULL, timeout=0.2))
    assert (result.timed_out, result.signal, result.exit_code) == (True, "SIGKILL", None)
    assert result.aborted is False
    assert 500 <= result.duration_ms < 500 + 1500  # timeout + grace, then SIGKILL at once
    assert time.monotonic() - start < 5


def test_timeout_is_capped_by_config(host_with):
    host = host_with(Config(timeout=TimeoutConfig(default=0.2, max=0.3)))
    result = host.run(ExecRequest(["sleep", "5"], mode=FULL, timeout=100))
    assert result.timeout_s == 0.3
    assert result.timed_out
    assert (result.signal, result.exit_code) == ("SIGTERM", None)
    assert 300 <= result.duration_ms < 1500


def test_default_timeout_applies_when_the_request_names_none(host_with):
    host = host_with(Config(timeout=TimeoutConfig(default=0.2, max=5)))
    result = host.run(ExecRequest(["sleep", "5"], mode=FULL))
    assert result.timeout_s == 0.2
    assert (result.timed_out, result.signal) == (True, "SIGTERM")
    assert 200 <= result.duration_ms < 1500


def test_a_command_that_finishes_in_time_is_not_timed_out(host):
    result = host.run(ExecRequest(["sh", "-c", "exit 3"], mode=FULL, timeout=5))
    assert (result.exit_code, result.signal, result.timed_out, result.aborted) == (
        3,
        None,
        False,
        False,
    )
    assert result.ok is False
    result = host.run(ExecRequest(["sh", "-c", "kill -SEGV $$"], mode=FULL, timeout=5))
    assert (result.exit_code, result.signal, result.timed_out) == (None, "SIGSEGV", False)


def test_daemonized_grandchild_is_killed_and_reaped(host, tmp_path, escapees):
    pidfile = tmp_path / "daemon.pid"
    result = host.run(ExecRequest(_daemon(pidfile), mode=FULL))
    daemon = _pid(pidfile)
    escapees.append(daemon)
    assert result.exit_code == 0
    # The sweep runs before run() returns and reaps what it kills: no wait, no zombie.
    assert procs.state(daemon) is None, f"daemon {daemon} outlived the command"


def test_background_job_in_the_group_dies_with_the_leader(host, tmp_path, escapees):
    pidfile = tmp_path / "bg.pid"
    start = time.monotonic()
    result = host.run(ExecRequest(["sh", "-c", f"sleep 1000 & echo $! > {pidfile}"], mode=FULL))
    job = _pid(pidfile)
    escapees.append(job)
    assert result.exit_code == 0
    assert time.monotonic() - start < 3
    assert _dead(job)


# The leader forks a child that exits at once and is never waited for; the leader exits
# leaving it a zombie, which is re-parented to the host (the subreaper).
UNWAITED = textwrap.dedent(
    """
    import os, sys, time
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    def state():
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    while state() != "Z":
        time.sleep(0.005)
    with open(sys.argv[1], "w") as f:
        f.write(str(pid))
    """
)


def test_orphaned_zombies_are_reaped_by_the_sweep(host, tmp_path, escapees):
    pidfile = tmp_path / "zombie.pid"
    result = host.run(ExecRequest([sys.executable, "-c", UNWAITED, str(pidfile)], mode=FULL))
    zombie = _pid(pidfile)
    escapees.append(zombie)
    assert result.exit_code == 0
    assert procs.wait_until(lambda: procs.state(zombie) is None, timeout=30), (
        f"{zombie} is left as a zombie child of the host: {procs.state(zombie)}"
    )


def test_daemon_escaping_on_timeout_is_killed_too(host, tmp_path, escapees):
    pidfile = tmp_path / "daemon.pid"
    result = host.run(ExecRequest(_daemon(pidfile, linger=30), mode=FULL, timeout=1))
    daemon = _pid(pidfile)
    escapees.append(daemon)
    assert result.timed_out
    assert result.duration_ms < 1000 + 1500
    assert procs.state(daemon) is None


def test_a_child_holding_the_pipe_open_does_not_hang_the_run(host):
    start = time.monotonic()
    result = host.run(ExecRequest(["sh", "-c", "setsid sleep 1000 & echo done"], mode=FULL))
    assert result.stdout.text == "done\n"
    assert result.exit_code == 0
    assert time.monotonic() - start < 3


def test_an_unmarked_escapee_holding_the_pipe_delays_the_run_only_boundedly(
    host, tmp_path, escapees
):
    # env -i wipes the run's mark: the sweep cannot attribute it (only a PID namespace can),
    # but it must not keep the run waiting for its pipes.
    pidfile = tmp_path / "escapee.pid"
    script = (
        f"setsid env -i sh -c 'echo $$ > {pidfile}; exec sleep 1000' & "
        f"while [ ! -s {pidfile} ]; do sleep 0.01; done; echo done"
    )
    result = host.run(ExecRequest(["sh", "-c", script], mode=FULL, timeout=20))
    escapees.append(_pid(pidfile))
    assert result.stdout.text == "done\n"
    assert not result.timed_out  # waiting for the escapee's pipes would end in the timeout


def test_abort_from_another_thread_kills_the_group(host, tmp_path, escapees):
    leader_file, child_file = tmp_path / "leader.pid", tmp_path / "sleep.pid"
    token = AbortToken()
    script = f"echo $$ > {leader_file}; sleep 1000 & echo $! > {child_file}; wait"
    timer = threading.Timer(0.3, token.abort)
    timer.start()
    result = host.run(ExecRequest(["sh", "-c", script], mode=FULL, timeout=60), abort=token)
    timer.join()
    leader, child = _pid(leader_file), _pid(child_file)
    escapees.extend([leader, child])
    assert (result.aborted, result.timed_out) == (True, False)
    assert (result.exit_code, result.signal) == (None, "SIGTERM")
    assert procs.state(leader) is None
    assert _dead(child)


def test_abort_fired_before_the_run_stops_it_at_once(host, tmp_path):
    token = AbortToken()
    token.abort()
    start = time.monotonic()
    result = host.run(ExecRequest(["sleep", "30"], mode=FULL, timeout=60), abort=token)
    assert result.aborted and not result.timed_out
    assert result.exit_code != 0
    assert time.monotonic() - start < 3


def test_abort_of_a_sigterm_ignoring_command_kills_it_after_the_grace(host_with, tmp_path):
    host = host_with(Config(timeout=TimeoutConfig(kill_grace=0.3)))
    token = AbortToken()
    timer = threading.Timer(0.2, token.abort)
    timer.start()
    result = host.run(
        ExecRequest(["sh", "-c", 'trap "" TERM; sleep 30'], mode=FULL, timeout=60), abort=token
    )
    timer.join()
    assert (result.aborted, result.timed_out, result.signal) == (True, False, "SIGKILL")
    assert 300 <= result.duration_ms < 200 + 300 + 1500  # at least the grace after SIGTERM


def test_cancelling_run_async_kills_before_cancelled_error(host, tmp_path, escapees):
    pidfile = tmp_path / "sleep.pid"
    request = ExecRequest(["sh", "-c", f"echo $$ > {pidfile}; exec sleep 1000"], mode=FULL)

    async def scenario() -> int:
        task = asyncio.create_task(host.run_async(request))
        pid = await asyncio.to_thread(_pid, pidfile)
        escapees.append(pid)
        assert procs.alive(pid)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert procs.state(pid) is None  # dead and reaped before the error reached us
        return pid

    asyncio.run(scenario())


def test_cancelling_run_async_waits_for_a_sigterm_ignoring_command(host_with, tmp_path, escapees):
    host = host_with(Config(timeout=TimeoutConfig(kill_grace=0.4)))
    pidfile = tmp_path / "sleep.pid"
    script = f'trap "" TERM; echo $$ > {pidfile}; sleep 1000'
    request = ExecRequest(["sh", "-c", script], mode=FULL)

    async def scenario() -> float:
        task = asyncio.create_task(host.run_async(request))
        pid = await asyncio.to_thread(_pid, pidfile)
        escapees.append(pid)
        task.cancel()
        cancelled = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert procs.state(pid) is None
        return time.monotonic() - cancelled

    waited = asyncio.run(scenario())
    assert 0.4 <= waited < 3  # the SIGKILL after the grace, and not a hang


def test_cancelled_run_async_closes_its_record(make_host, event_log, tmp_path):
    host = make_host(allow_all=True, plugins=[event_log])
    pidfile = tmp_path / "sleep.pid"
    request = ExecRequest(["sh", "-c", f"echo $$ > {pidfile}; exec sleep 1000"], mode=FULL)

    async def scenario() -> None:
        task = asyncio.create_task(host.run_async(request))
        await asyncio.to_thread(_pid, pidfile)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    kinds = event_log.kinds()
    assert kinds[:2] == ["action", "permission"]
    assert len(kinds) == 3 and kinds[2] in ("result", "error"), kinds
    assert len({event.action_id for event in event_log.events}) == 1


def test_another_runs_sweep_spares_a_live_runs_daemon(host, tmp_path, escapees):
    pidfile, stop = tmp_path / "daemon.pid", tmp_path / "stop"
    # Run A starts a daemon, then waits (up to 20 s) for the stop file before it ends.
    script = DAEMON.replace(
        "time.sleep(float(sys.argv[2]))", "while not os.path.exists(sys.argv[2]): time.sleep(0.01)"
    )
    box: dict[str, object] = {}

    def run_a() -> None:
        box["a"] = host.run(
            ExecRequest(
                [sys.executable, "-c", script, str(pidfile), str(stop)], mode=FULL, timeout=20
            )
        )

    thread = threading.Thread(target=run_a)
    thread.start()
    try:
        daemon = _pid(pidfile)
        escapees.append(daemon)
        for _ in range(3):  # run B, three times: each one ends with a sweep
            other = host.run(ExecRequest(["sh", "-c", "sleep 0.05 & echo b"], mode=FULL))
            assert other.stdout.text == "b\n"
        assert procs.alive(daemon), "another run's sweep killed a live run's daemon"
    finally:
        stop.touch()
        thread.join()
    assert box["a"].exit_code == 0 and not box["a"].timed_out
    assert procs.state(daemon) is None  # run A's own sweep took it when A ended


HOST_SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    from stockade.host import Host
    from stockade.request.spec import ExecRequest
    from stockade.testing import AllowAll
    host = Host(plugins=[AllowAll()])
    request = ExecRequest(sys.argv[1:], mode="danger-full-access", timeout=600)
    threading.Thread(target=host.run, args=(request,), daemon=True).start()
    time.sleep(1000)
    """
)


def _kill_host_and_watch(argv, pidfile, escapees) -> None:
    host = subprocess.Popen([sys.executable, "-c", HOST_SCRIPT, *argv])
    try:
        child = _pid(pidfile)
        escapees.append(child)
        assert procs.alive(child)
        os.kill(host.pid, signal.SIGKILL)
        host.wait()
        assert procs.wait_until(lambda: not procs.alive(child), timeout=30), "outlived its host"
        procs.reap_if_ours(child)  # we are a subreaper: the orphan may be our zombie now
    finally:
        host.kill()
        host.wait()


def test_host_death_kills_its_running_commands(tmp_path, escapees):
    pidfile = tmp_path / "sleep.pid"
    _kill_host_and_watch(["sh", "-c", f"echo $$ > {pidfile}; exec sleep 1000"], pidfile, escapees)


def test_host_death_kills_a_daemon_that_left_the_group(tmp_path, escapees):
    pidfile = tmp_path / "daemon.pid"
    _kill_host_and_watch(_daemon(pidfile, linger=1000), pidfile, escapees)
