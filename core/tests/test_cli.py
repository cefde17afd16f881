"""The command line, run as a user runs it: a real process, real exit statuses."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from stockade.testing import CLI

STOCKADE = [*CLI]  # the native client when the session runs through the server


def cli(*args, env=None, **kw):
    environ = {**os.environ, "STOCKADE_DISABLE_PLUGINS": "bubblewrap,landlock", **(env or {})}
    environ.pop("STOCKADE_CONFIG", None)
    environ["XDG_CONFIG_HOME"] = "/nonexistent"
    return subprocess.run(
        [*STOCKADE, *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
        check=False,
        **kw,
    )


def test_run_prints_output_and_passes_the_exit_status():
    done = cli(
        "run",
        "--yes",
        "--mode",
        "danger-full-access",
        "--",
        "sh",
        "-c",
        "echo out; echo err >&2; exit 7",
    )
    assert (done.returncode, done.stdout, done.stderr) == (7, "out\n", "err\n")


def test_json_result_keys():
    done = cli(
        "run",
        "--json",
        "--yes",
        "--mode",
        "danger-full-access",
        "--env",
        "A=b c",
        "--",
        "sh",
        "-c",
        'printf "%s" "$A"',
    )
    data = json.loads(done.stdout)
    assert done.returncode == 0
    assert data["stdout"]["text"] == "b c"
    for key in (
        "exit_code",
        "signal",
        "timed_out",
        "aborted",
        "duration_ms",
        "stdout",
        "stderr",
        "sandbox",
    ):
        assert key in data
    assert (data["sandbox"]["provider"], data["sandbox"]["mode"]) == ("none", "danger-full-access")


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["run", "--", "true"], 125, "error[sandbox_unavailable]"),
        (
            ["run", "--mode", "danger-full-access", "--", "no-such-program-x"],
            127,
            "program not found: no-such-program-x",
        ),
        (
            ["run", "--mode", "danger-full-access", "--cwd", "/nonexistent", "--", "true"],
            125,
            "error[bad_cwd]",
        ),
        (
            ["run", "--mode", "danger-full-access", "--memory-mb", "0", "--", "true"],
            125,
            "error[usage]: memory_mb must be a positive number",
        ),
        (
            ["run", "--mode", "danger-full-access", "--env", "NOEQUALS", "--", "true"],
            125,
            "--env takes NAME=VALUE",
        ),
        (["run", "--mode", "sideways", "--", "true"], 125, "error[usage]"),
        (["run"], 125, "run needs a program"),
        (
            ["run", "--mode", "danger-full-access", "--sandbox", "nope", "--", "true"],
            125,
            "unknown sandbox provider 'nope'; installed: none",
        ),
    ],
)
def test_stockade_errors_have_their_exit_status(args, status, message):
    done = cli(*args)
    assert done.returncode == status, done.stderr
    assert message in done.stderr


def test_timeout_signal_and_json_error_statuses():
    timed = cli("run", "--mode", "danger-full-access", "--timeout", "0.2", "--", "sleep", "5")
    assert timed.returncode == 124
    killed = cli("run", "--yes", "--mode", "danger-full-access", "--", "sh", "-c", "kill -9 $$")
    assert killed.returncode == 128 + 9
    error = cli("run", "--json", "--", "true")
    assert error.returncode == 125
    assert json.loads(error.stdout)["error"]["code"] == "sandbox_unavailable"


def test_bad_config_is_a_readable_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[timeout]\ndefualt = 3\n")
    done = cli("--config", str(bad), "run", "--mode", "danger-full-access", "--", "true")
    assert done.returncode == 125
    assert "unknown key 'defualt' @ $.timeout" in done.stderr


def test_plugins_and_doctor_and_version():
    listing = json.loads(cli("plugins", "--json").stdout)
    assert {p["name"] for p in listing["plugins"]} >= {"local", "stockade.builtin.policy"}
    assert [e["name"] for e in listing["executors"]] == ["local"]
    blocked = json.loads(
        cli(
            "plugins", "--json", env={"STOCKADE_DISABLE_PLUGINS": "local,bubblewrap,landlock"}
        ).stdout
    )
    assert "local" not in {p["name"] for p in blocked["plugins"]}
    doctor = cli("doctor", "--json")
    report = json.loads(doctor.stdout)
    modes = {m["name"]: m["ok"] for m in report["modes"]}
    assert modes["danger-full-access"] is True
    assert doctor.returncode == (0 if report["ok"] else 1)
    assert {f["name"] for f in report["kernel"]} == {
        "user namespaces",
        "landlock",
        "seccomp",
        "forks",
    }
    assert cli("--version").stdout.startswith("stockade ")


def test_a_reader_that_leaves_early_gets_141_and_no_traceback():
    environ = {**os.environ, "STOCKADE_DISABLE_PLUGINS": "bubblewrap,landlock"}
    environ.pop("STOCKADE_CONFIG", None)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    try:
        proc = subprocess.run(
            [*STOCKADE, "run", "--json", "--mode", "danger-full-access", "--", "echo", "hi"],
            stdout=write,
            stderr=subprocess.PIPE,
            env=environ,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)
    assert proc.returncode == 141
    assert b"Traceback" not in proc.stderr, proc.stderr


def test_a_recorder_dying_after_the_run_gives_one_json_document(monkeypatch, capsys, make_host):
    from stockade import hookimpl
    from stockade.cli import main, run

    class DiesOnResult:
        @hookimpl
        def stockade_record(self, event):
            if event.kind == "result":
                raise OSError("disk full")

    host = make_host(plugins=[DiesOnResult()])
    monkeypatch.setattr(run, "make_host", lambda args, **_: host)
    status = main(["run", "--json", "--mode", "danger-full-access", "--", "echo", "hi"])
    document = json.loads(capsys.readouterr().out)  # one document, or this raises
    assert status == 125
    assert document["error"]["code"] == "recorder_failed"
    assert document["result"]["stdout"]["text"] == "hi\n"
    assert document["result"]["exit_code"] == 0


def test_classify_says_the_class_and_why_and_runs_nothing(tmp_path):
    done = cli("classify", "--json", "--", "git", "push", "--force")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["kind"] == "destroys"
    assert "git push --force" in result["reasons"][0]
    assert result["by"] == ["builtin-classifier"]
    canary = tmp_path / "canary"
    plain = cli("classify", "--", "touch", str(canary))
    assert plain.stdout.strip() == "writes: touch is listed as writes"
    assert not canary.exists()
    assert cli("classify").returncode == 125


def test_the_file_tools_from_the_command_line(tmp_path):
    (tmp_path / ".git").mkdir()
    wrote = cli("file", "write", "notes/todo.txt", "--json", cwd=tmp_path, input="ship it\n")
    assert wrote.returncode == 0, wrote.stderr
    assert json.loads(wrote.stdout)["created"] is True
    assert (tmp_path / "notes" / "todo.txt").read_text() == "ship it\n"
    read = cli("file", "read", "notes/todo.txt", cwd=tmp_path)
    assert (read.returncode, read.stdout) == (0, "ship it\n")
    listed = cli("file", "list", "--json", cwd=tmp_path)
    assert [e["name"] for e in json.loads(listed.stdout)["entries"]] == [".git", "notes"]
    refused = cli("file", "write", ".git/hooks/pre-commit", cwd=tmp_path, input="evil")
    assert refused.returncode == 125
    assert "inside protected '.git'" in refused.stderr
    assert not (tmp_path / ".git" / "hooks").exists()
    out = cli("file", "read", "../x", "--json", cwd=tmp_path)
    assert json.loads(out.stdout)["error"]["code"] == "usage"


def test_a_named_agent_says_where_it_ran_when_that_is_not_here(tmp_path):
    ws, here = tmp_path / "ws", tmp_path / "here"
    ws.mkdir()
    here.mkdir()
    config = tmp_path / "config.toml"
    config.write_text(f'[agents.builder]\nworkspace = "{ws}"\n')
    base = ("--config", str(config), "run", "--mode", "danger-full-access")
    away = cli(*base, "--agent", "builder", "--", "pwd", cwd=here)
    assert (away.returncode, away.stdout) == (0, f"{ws}\n")
    assert away.stderr == f"stockade: ran in {ws} (the workspace of agent builder)\n"
    # The control: run from inside the workspace, or as the default profile, nothing is said.
    inside = cli(*base, "--agent", "builder", "--", "pwd", cwd=ws)
    assert (inside.stdout, inside.stderr) == (f"{ws}\n", "")
    mine = cli(*base, "--", "pwd", cwd=here)
    assert (mine.stdout, mine.stderr) == (f"{here}\n", "")
