"""The local executor on the run path: argv, program and cwd errors, environment, stdin,
events, concurrency. Every test starts real processes."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest

from stockade.config.schema import Config, EnvConfig
from stockade.errors import BadCwd, ProgramNotFound, SandboxUnavailable, SpawnFailed, Unsupported
from stockade.record.events import ActionEvent, ErrorEvent, PermissionEvent, ResultEvent
from stockade.request.spec import ExecRequest

FULL = "danger-full-access"
HELPERS = Path(__file__).parent / "helpers"


def req(argv: list[str], **fields: object) -> ExecRequest:
    fields.setdefault("mode", FULL)
    return ExecRequest(argv, **fields)  # type: ignore[arg-type]


# --- argv is never a shell string ----------------------------------------------------------

METACHARACTERS = [
    "; touch CANARY",
    "$(touch CANARY)",
    "`touch CANARY`",
    "| touch CANARY",
    "> CANARY",
    "&& touch CANARY",
    "*",
    "?ile*",
    "a\nb",
    "'single' \"double\" \\back",
    "$HOME ${PATH} ~",
    "",
    "  spaced  ",
]


def test_argv_with_shell_metacharacters_is_passed_literally(host, tmp_path):
    (tmp_path / "file1").write_text("x")  # a glob would expand to this
    result = host.run(req(["printf", "%s\\n", *METACHARACTERS], cwd=str(tmp_path)))
    assert result.exit_code == 0
    assert result.stdout.text == "".join(f"{arg}\n" for arg in METACHARACTERS)
    assert result.stderr.text == ""
    assert not (tmp_path / "CANARY").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file1"]


def test_argv_reaches_the_program_byte_for_byte(host, tmp_path):
    script = "import sys; sys.stdout.write(repr(sys.argv[1:]))"
    args = ["; rm -rf /", "$(id)", "\t", "é", "--", "-c"]
    result = host.run(req([sys.executable, "-c", script, *args], cwd=str(tmp_path)))
    assert result.stdout.text == repr(args)


def test_program_name_with_metacharacters_is_a_name_not_a_command(host, tmp_path):
    with pytest.raises(ProgramNotFound) as caught:
        host.run(req(["touch CANARY; true"], cwd=str(tmp_path)))
    assert "touch CANARY; true" in caught.value.message
    assert not (tmp_path / "CANARY").exists()


def test_a_single_string_argv_is_refused():
    with pytest.raises(TypeError, match="not one string"):
        ExecRequest("echo hi", mode=FULL)  # type: ignore[arg-type]


# --- the program -----------------------------------------------------------------------------


def test_missing_program_names_it_and_the_path_searched(make_host, tmp_path):
    path = f"{tmp_path}/a:{tmp_path}/b"
    host = make_host(allow_all=True, environ={"PATH": path})
    with pytest.raises(ProgramNotFound) as caught:
        host.run(req(["no-such-program-xyz"]))
    error = caught.value
    assert error.exit_status == 127
    assert error.code == "program_not_found"
    assert error.message == f"program not found: no-such-program-xyz (searched PATH={path})"
    assert error.details == {"program": "no-such-program-xyz", "searched": path}


def test_program_is_searched_on_the_childs_path_from_the_request(host, tmp_path):
    tool = tmp_path / "bin" / "mytool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho from-mytool\n")
    tool.chmod(0o755)
    result = host.run(req(["mytool"], env={"PATH": f"{tool.parent}:/usr/bin:/bin"}))
    assert result.stdout.text == "from-mytool\n"


def test_non_executable_file_is_not_a_program(host, tmp_path):
    target = tmp_path / "script.sh"
    target.write_text("#!/bin/sh\ntouch CANARY\n")
    target.chmod(0o644)
    with pytest.raises(ProgramNotFound) as caught:
        host.run(req([str(target)], cwd=str(tmp_path)))
    assert caught.value.exit_status == 127
    assert caught.value.message == f"program not found: {target} (no executable file at {target})"
    assert not (tmp_path / "CANARY").exists()


def test_relative_program_path_is_resolved_against_the_cwd(host, tmp_path):
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\npwd\n")
    tool.chmod(0o755)
    result = host.run(req(["./tool"], cwd=str(tmp_path)))
    assert result.stdout.text == f"{tmp_path}\n"


def test_directory_as_program_by_path(host, tmp_path):
    with pytest.raises(ProgramNotFound) as caught:
        host.run(req([str(tmp_path)]))
    assert caught.value.message == (
        f"program not found: {tmp_path} (no executable file at {tmp_path})"
    )


def test_directory_on_path_with_the_programs_name_is_skipped(make_host, tmp_path):
    (tmp_path / "first" / "true").mkdir(parents=True)  # a directory named like the program
    host = make_host(allow_all=True, environ={"PATH": f"{tmp_path}/first:/usr/bin:/bin"})
    result = host.run(req(["true"]))
    assert result.exit_code == 0
    with pytest.raises(ProgramNotFound):
        make_host(allow_all=True, environ={"PATH": f"{tmp_path}/first"}).run(req(["true"]))


def test_executable_without_a_format_is_spawn_failed_not_run_by_a_shell(
    make_host, event_log, tmp_path
):
    host = make_host(allow_all=True, plugins=[event_log])
    script = tmp_path / "noshebang"
    script.write_text("touch CANARY\n")  # a shell would run this; execve refuses it
    script.chmod(0o755)
    with pytest.raises(SpawnFailed) as caught:
        host.run(req([str(script)], cwd=str(tmp_path)))
    error = caught.value
    assert error.exit_status == 126
    assert error.code == "spawn_failed"
    assert error.details == {"program": str(script), "errno": "ENOEXEC"}
    assert error.message == f"cannot start {script}: Exec format error (ENOEXEC)"
    assert not (tmp_path / "CANARY").exists()
    assert event_log.kinds() == ["action", "permission", "error"]
    failure = event_log.events[-1]
    assert isinstance(failure, ErrorEvent)
    assert failure.code == "spawn_failed"
    assert failure.message == error.message
    assert failure.action_id == event_log.events[0].action_id


def test_permission_lost_after_resolve_is_spawn_failed(host, tmp_path):
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\ntouch CANARY\n")
    tool.chmod(0o755)
    plan = host.prepare(host.admit(req([str(tool)], cwd=str(tmp_path)))).plan
    tool.chmod(0o644)
    with pytest.raises(SpawnFailed) as caught:
        host.doer.executor.run(plan)
    assert caught.value.details == {"program": str(tool), "errno": "EACCES"}
    assert not (tmp_path / "CANARY").exists()


def test_a_process_that_cannot_be_watched_is_killed_not_left_running(host, tmp_path, monkeypatch):
    from stockade_local import executor

    pid_file = tmp_path / "pid"

    def no_fd_left(pid):
        deadline = time.monotonic() + 10  # fail only once the command is surely running
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(executor.os, "pidfd_open", no_fd_left)
    script = "echo $$ > pid.tmp && mv pid.tmp pid; while :; do sleep 0.05; done"
    with pytest.raises(OSError, match="Too many open files"):
        host.run(req(["sh", "-c", script], cwd=str(tmp_path)))
    pid = int(pid_file.read_text())
    stat = Path(f"/proc/{pid}/stat")
    assert not stat.exists(), "the command that could not be watched is still there"


def test_program_removed_after_resolve_is_program_not_found(host, tmp_path):
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    plan = host.prepare(host.admit(req([str(tool)], cwd=str(tmp_path)))).plan
    tool.unlink()
    with pytest.raises(ProgramNotFound) as caught:
        host.doer.executor.run(plan)
    assert caught.value.exit_status == 127
    assert caught.value.message == f"program not found: {tool}"


# --- the working directory -------------------------------------------------------------------


def test_missing_cwd_is_bad_cwd(host, tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(BadCwd) as caught:
        host.run(req(["true"], cwd=str(missing)))
    assert caught.value.code == "bad_cwd"
    assert caught.value.message == f"working directory {missing} does not exist"
    assert caught.value.details == {"cwd": str(missing)}


def test_file_as_cwd_is_bad_cwd(host, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(BadCwd) as caught:
        host.run(req(["true"], cwd=str(afile)))
    assert caught.value.message == f"working directory {afile} is not a directory"


def test_command_runs_in_the_requested_cwd(host, tmp_path):
    result = host.run(req(["pwd"], cwd=str(tmp_path)))
    assert result.stdout.text == f"{tmp_path}\n"


# --- the environment -------------------------------------------------------------------------

AMBIENT = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/home/agent",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "GITHUB_TOKEN": "ghp_canary_github",
    "AWS_SECRET_ACCESS_KEY": "aws_canary_secret",
    "MY_PASSWORD": "canary_password",
    "api_key": "canary_lowercase_key",
    "LC_TOKEN": "canary_lc_token",
    "FOO_UNLISTED": "canary_unlisted",
    "DEPLOY_TOKEN": "canary_deploy",
}
CANARY_VALUES = [v for k, v in AMBIENT.items() if "canary" in v]
FIXED = {"CI": "1", "PAGER": "cat", "GIT_PAGER": "cat", "NO_COLOR": "1", "TERM": "dumb"}


def child_environ(host, **fields) -> dict[str, str]:
    result = host.run(req(["env", "-0"], **fields))
    assert result.exit_code == 0, result.stderr.text
    entries = [e for e in result.stdout.text.split("\0") if e]
    return dict(e.split("=", 1) for e in entries)


def proc_environ(host, **fields) -> dict[str, str]:
    result = host.run(req(["cat", "/proc/self/environ"], **fields))
    assert result.exit_code == 0, result.stderr.text
    return dict(e.split("=", 1) for e in result.stdout.text.split("\0") if e)


def test_child_env_is_exactly_the_allowlist_plus_fixed_entries(make_host):
    host = make_host(allow_all=True, environ=AMBIENT)
    env = child_environ(host, env={"MY_API_TOKEN": "explicit-secret"})
    run_id = env.pop("STOCKADE_RUN_ID")
    assert re.fullmatch(r"[0-9a-f]{16}", run_id)
    assert env == {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/home/agent",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        **FIXED,
        "MY_API_TOKEN": "explicit-secret",
    }


def test_secrets_are_absent_from_proc_self_environ(make_host):
    host = make_host(allow_all=True, environ=AMBIENT)
    result = host.run(req(["cat", "/proc/self/environ"]))
    raw = result.stdout.text
    for value in CANARY_VALUES:
        assert value not in raw
    names = {e.split("=", 1)[0] for e in raw.split("\0") if e}
    for name in (
        "GITHUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "MY_PASSWORD",
        "api_key",
        "LC_TOKEN",
        "FOO_UNLISTED",
        "DEPLOY_TOKEN",
    ):
        assert name not in names
    for name, value in FIXED.items():
        assert f"{name}={value}" in raw.split("\0")


def test_explicit_secret_looking_entry_reaches_the_child(make_host):
    host = make_host(allow_all=True, environ=AMBIENT)
    env = proc_environ(host, env={"GITHUB_TOKEN": "given-on-purpose", "api_key": "k"})
    assert env["GITHUB_TOKEN"] == "given-on-purpose"
    assert env["api_key"] == "k"


def test_explicit_entries_win_over_fixed_ones(make_host):
    host = make_host(allow_all=True, environ=AMBIENT)
    env = child_environ(host, env={"TERM": "xterm", "PAGER": "less"})
    assert env["TERM"] == "xterm"
    assert env["PAGER"] == "less"


def test_config_env_allow_passes_a_name_but_never_a_secret(make_host):
    config = Config(env=EnvConfig(allow=("FOO_UNLISTED", "DEPLOY_TOKEN")))
    host = make_host(allow_all=True, environ=AMBIENT, config=config)
    env = child_environ(host)
    assert env["FOO_UNLISTED"] == "canary_unlisted"
    assert "DEPLOY_TOKEN" not in env


def test_missing_ambient_path_gets_the_default(make_host):
    host = make_host(allow_all=True, environ={})
    env = child_environ(host)
    env.pop("STOCKADE_RUN_ID")
    assert env == {"PATH": "/usr/local/bin:/usr/bin:/bin", **FIXED}


def test_the_run_marker_cannot_be_chosen_by_the_request(host):
    env = child_environ(host, env={"STOCKADE_RUN_ID": "chosen"})
    assert env["STOCKADE_RUN_ID"] != "chosen"


# --- stdin -----------------------------------------------------------------------------------


def test_stdin_bytes_are_delivered_exactly(host):
    data = b"line one\n\x00\xff binary \r\n no trailing newline"
    result = host.run(req(["od", "-An", "-tx1", "-v"], stdin=data))
    assert bytes.fromhex(result.stdout.text) == data


def test_five_megabytes_of_stdin_round_trip_through_cat(host):
    data = os.urandom(5 * 1024 * 1024)
    result = host.run(req(["cat"], stdin=data, timeout=20))
    assert result.exit_code == 0
    out = result.stdout
    assert out.total_bytes == len(data)
    assert out.sha256 == hashlib.sha256(data).hexdigest()
    assert out.truncated  # the default limit is 1 MiB: the rest went to the spill file
    assert out.spill_path is not None
    spilled = Path(out.spill_path)
    try:
        assert spilled.read_bytes() == data
    finally:
        spilled.unlink()


def test_stdin_the_program_never_reads_does_not_hang(host):
    start = time.monotonic()
    result = host.run(req(["true"], stdin=os.urandom(4 * 1024 * 1024), timeout=10))
    assert result.exit_code == 0
    assert not result.timed_out
    assert time.monotonic() - start < 5


def test_no_stdin_is_immediate_eof_from_dev_null(host):
    result = host.run(req(["cat"], timeout=10))
    assert result.exit_code == 0
    assert result.stdout.text == ""
    assert not result.timed_out
    assert result.duration_ms < 2000
    result = host.run(req(["sh", "-c", 'test -t 0; echo "tty=$?"; readlink /proc/self/fd/0']))
    assert result.stdout.text == "tty=1\n/dev/null\n"


def test_stdout_and_stderr_are_pipes_not_a_terminal(host):
    result = host.run(req(["sh", "-c", 'test -t 1; echo "$?"; test -t 2; echo "$?"']))
    assert result.stdout.text == "1\n1\n"


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
