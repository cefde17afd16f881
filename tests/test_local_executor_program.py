"""The local executor on the run path: the argv is never a shell string, the program is
found (or named in a clear error) as the request's PATH and cwd say, and a bad working
directory is refused. Every test starts real processes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from helpers.executor import FULL, req
from stockade.errors import BadCwd, ProgramNotFound, SpawnFailed
from stockade.record.events import ErrorEvent
from stockade.request.spec import ExecRequest

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
