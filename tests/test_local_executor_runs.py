"""The local executor on the run path: the grace signal and who gets it, errors and events
recorded in order, and runs at once (threads, asyncio, two hosts, a nested embedding) that
keep their own output. Every test starts real processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest

from helpers.executor import FULL, req
from stockade.errors import SandboxUnavailable, Unsupported
from stockade.record.events import ActionEvent, PermissionEvent, ResultEvent
from stockade.request.spec import ExecRequest

HELPERS = Path(__file__).parent / "helpers"


# --- the grace signal: the group, or a runner's descendants --------------------------------

# A stand-in for a sandbox runner: it starts the command in a session of its own (as bwrap
# does), waits for it, and exits with its status. It keeps the default SIGTERM action, so a
# SIGTERM sent to it would kill it at once.
RUNNER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.setsid()
    os.execvp(sys.argv[1], sys.argv[1:])
status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(f"runner saw {status}", flush=True)
sys.exit(status if status >= 0 else 128 - status)
"""
TRAPPER = 'trap "echo trapped; exit 3" TERM; echo started; sleep 30 & wait'


def _runner_plan(host, tmp_path, *, runner: bool):
    argv = [sys.executable, "-c", RUNNER, "sh", "-c", TRAPPER]
    plan = host.prepare(host.admit(req(argv, cwd=str(tmp_path), timeout=0.5))).plan
    assert plan.runner is False  # an unconfined plan runs the program itself
    return attrs.evolve(plan, runner=runner, kill_grace=10.0)


def test_a_runner_plan_sends_sigterm_to_the_command_not_the_runner(host, tmp_path):
    result = host.doer.executor.run(_runner_plan(host, tmp_path, runner=True))
    assert result.timed_out
    assert result.stdout.text == "started\ntrapped\nrunner saw 3\n"
    assert (result.exit_code, result.signal) == (3, None)
    assert result.duration < 5  # the trap ran at the SIGTERM, long before the SIGKILL


def test_without_the_runner_flag_sigterm_goes_to_the_group_only(host, tmp_path):
    # The plan as every unconfined run has it: the group's leader (here the stand-in runner)
    # gets SIGTERM and dies; the command in its own session is only killed by the sweep.
    result = host.doer.executor.run(_runner_plan(host, tmp_path, runner=False))
    assert result.timed_out
    assert result.stdout.text == "started\n"
    assert (result.exit_code, result.signal) == (None, "SIGTERM")


def test_descendants_are_every_level_below_a_process_parents_first():
    from stockade_local import reaper

    # outer sh -> (inner sh -> sleep), sleep: two levels, three processes below the root.
    script = "sh -c 'sleep 30 & wait' & sleep 30 & wait"
    proc = subprocess.Popen(["sh", "-c", script], process_group=0)
    found: list[int] = []
    try:
        deadline = time.monotonic() + 5
        while len(found) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
            found = reaper.descendants(proc.pid)
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert len(found) == 3, found
        assert proc.pid not in found
        assert sorted(found[:2]) == sorted(int(pid) for pid in children)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for pid in found:  # re-parented to this process if it is a subreaper: reap them
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    assert reaper.descendants(proc.pid) == []


# --- errors and events -----------------------------------------------------------------------


def test_events_are_action_permission_result_in_order(make_host, event_log):
    host = make_host(allow_all=True, plugins=[event_log])
    result = host.run(req(["echo", "hi"]))
    assert event_log.kinds() == ["action", "permission", "result", "taint"]
    action, permission, outcome, taint = event_log.events
    # the breaker's fact after it: its output came back (somebody else's words)
    assert (taint.taint, taint.source) == ("untrusted", "output")  # type: ignore[union-attr]
    assert isinstance(action, ActionEvent)
    assert isinstance(permission, PermissionEvent)
    assert isinstance(outcome, ResultEvent)
    assert action.argv == ("echo", "hi")
    assert action.action_id == permission.action_id == outcome.action_id == result.action_id
    assert permission.decision.verdict == "allow"
    assert outcome.result == result
    assert result.stdout.text == "hi\n"
    assert result.sandbox.provider == "none"
    assert result.sandbox.mode == FULL


@pytest.fixture
def no_prlimit(monkeypatch):
    """A machine without util-linux's prlimit: limits cannot be enforced."""
    from stockade_local import limits

    monkeypatch.setattr(limits, "PRLIMIT_PATHS", ("/nonexistent/prlimit",))


def test_limits_without_prlimit_are_unsupported_and_recorded(
    make_host, event_log, tmp_path, no_prlimit
):
    host = make_host(allow_all=True, plugins=[event_log])
    with pytest.raises(Unsupported) as caught:
        host.run(req(["touch", str(tmp_path / "CANARY")], memory_mb=64))
    assert caught.value.code == "unsupported"
    assert caught.value.details == {"option": "limits"}
    assert not (tmp_path / "CANARY").exists()
    assert event_log.kinds() == ["action", "permission", "error"]
    assert event_log.events[-1].code == "unsupported"


def test_run_async_raises_the_same_typed_error_and_records_it(
    make_host, event_log, tmp_path, no_prlimit
):
    host = make_host(allow_all=True, plugins=[event_log])
    with pytest.raises(Unsupported):
        asyncio.run(host.run_async(req(["touch", str(tmp_path / "CANARY")], memory_mb=64)))
    assert not (tmp_path / "CANARY").exists()
    assert event_log.kinds() == ["action", "permission", "error"]


def test_a_timed_out_run_is_recorded_as_a_result(make_host, event_log):
    host = make_host(allow_all=True, plugins=[event_log])
    result = host.run(req(["sleep", "30"], timeout=0.2))
    assert event_log.kinds(skip={"taint"}) == ["action", "permission", "result"]
    recorded = event_log.events[2].result
    assert recorded == result
    assert (recorded.timed_out, recorded.signal, recorded.exit_code) == (True, "SIGTERM", None)


def test_sandbox_unavailable_after_permission_is_recorded_as_an_error(make_host, event_log):
    environ = {**os.environ, "STOCKADE_DISABLE_PLUGINS": "bubblewrap,landlock"}
    host = make_host(allow_all=True, plugins=[event_log], environ=environ)
    with pytest.raises(SandboxUnavailable):
        host.run(ExecRequest(["true"], mode="workspace-write"))
    assert event_log.kinds() == ["action", "permission", "error"]


# --- concurrency -----------------------------------------------------------------------------


def _distinct(i: int, meeting: str) -> ExecRequest:
    """Run ``i`` checks in at ``meeting``, then waits until all twenty have: only runs that
    are alive at the same time can all finish (serial runs would each wait in vain)."""
    script = (
        'touch "$2/$1"; n=0; '
        'while [ "$(ls "$2" | wc -l)" -lt 20 ]; do n=$((n+1)); [ $n -gt 1500 ] && exit 3; '
        'sleep 0.01; done; printf "run-%s" "$1"'
    )
    return req(["sh", "-c", script, "sh", str(i), meeting], timeout=30)


def test_twenty_threads_at_once_each_get_their_own_output(host, tmp_path):
    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(lambda i: host.run(_distinct(i, str(tmp_path))), range(20)))
    assert [r.stdout.text for r in results] == [f"run-{i}" for i in range(20)]
    assert [r.exit_code for r in results] == [0] * 20
    assert len({r.action_id for r in results}) == 20


def test_twenty_asyncio_runs_at_once_each_get_their_own_output(host, tmp_path):
    async def main() -> list:
        runs = (host.run_async(_distinct(i, str(tmp_path))) for i in range(20))
        return await asyncio.gather(*runs)

    results = asyncio.run(main())
    assert [r.stdout.text for r in results] == [f"run-{i}" for i in range(20)]
    assert [r.exit_code for r in results] == [0] * 20


def test_runs_started_while_another_run_is_swept_are_not_killed(host):
    def one(i: int) -> tuple[int | None, str | None, str]:
        try:
            result = host.run(req(["sh", "-c", 'echo "ok$1"', "sh", str(i)], timeout=20))
        except Exception as error:  # noqa: BLE001 - any failure is the bug
            return (None, type(error).__name__, "")
        return (result.exit_code, result.signal, result.stdout.text)

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(one, range(200)))
    assert outcomes == [(0, None, f"ok{i}\n") for i in range(200)]


def test_two_hosts_in_one_process_do_not_kill_each_others_runs(make_host):
    first, second = make_host(allow_all=True), make_host(allow_all=True)
    box: dict[str, object] = {}

    def long_run() -> None:
        box["result"] = second.run(req(["sh", "-c", "sleep 1; echo survived"], timeout=20))

    thread = threading.Thread(target=long_run)
    thread.start()
    time.sleep(0.3)
    assert first.run(req(["true"])).exit_code == 0
    thread.join()
    result = box["result"]
    assert (result.exit_code, result.signal, result.stdout.text) == (0, None, "survived\n")


def test_embedding_programs_own_children_survive_a_sweep_when_nested(tmp_path):
    env = {**os.environ, "STOCKADE_RUN_ID": "0123456789abcdef"}
    done = subprocess.run(
        [sys.executable, str(HELPERS / "nested_mark.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "own child alive: True\n"
