"""The local executor on the run path: the child's environment is the allowlist, never a
secret it was not given, and its stdin, stdout and stderr are what they should be. Every
test starts real processes."""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

from helpers.executor import req
from stockade.config.schema import Config, EnvConfig

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
