"""getting-started.md and local-executor.md tell the truth: the command line's exit statuses
and JSON keys, a trapped timeout, and output cut to head and tail with a private spill file."""

from __future__ import annotations

import hashlib
import json
import signal
from pathlib import Path

import pytest

from helpers.docs import FULL_ACCESS
from stockade.cli import main
from stockade.config.schema import Config, OutputConfig, PluginsConfig
from stockade.request.spec import ExecRequest

# --- the command line, as getting-started.md describes it ---------------------------------


@pytest.fixture
def cli(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("STOCKADE_CONFIG", raising=False)
    monkeypatch.delenv("STOCKADE_DISABLE_PLUGINS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)

    def run(*argv: str) -> tuple[int, str, str]:
        status = main(list(argv))
        out, err = capsys.readouterr()
        return status, out, err

    return run


@pytest.mark.parametrize(
    ("options", "argv", "status"),
    [
        ([], ["echo", "hello"], 0),
        ([], ["sh", "-c", "exit 3"], 3),
        ([], ["sh", "-c", "kill -TERM $$"], 128 + signal.SIGTERM),
        ([], ["no-such-program-here"], 127),
        (["--timeout", "0.2"], ["sleep", "5"], 124),
        (["--timeout", "0.2"], ["sh", "-c", "trap 'exit 0' TERM; sleep 5 & wait"], 124),
        (["--memory-mb", "64"], ["true"], 0),
        (["--memory-mb", "64"], ["python3", "-c", "b = bytearray(256 << 20)"], 1),
    ],
)
def test_cli_exit_status(cli, options, argv, status):
    # --yes: a shell, and python -c, count as destroys, which asks a person.
    assert cli("run", "--yes", "--mode", FULL_ACCESS, *options, "--", *argv)[0] == status


def test_cli_default_mode_fails_closed(cli, monkeypatch):
    monkeypatch.setenv("STOCKADE_DISABLE_PLUGINS", "bubblewrap,landlock")  # no sandbox provider
    status, out, err = cli("run", "--", "echo", "hello")
    assert status == 125
    assert out == ""
    assert "error[sandbox_unavailable]" in err


def test_cli_cannot_start_is_126(cli, tmp_path):
    script = tmp_path / "noshebang"
    script.write_bytes(b"\x7fELF not really")
    script.chmod(0o755)
    assert cli("run", "--mode", FULL_ACCESS, "--", "./noshebang")[0] == 126


def test_cli_json_result_keys(cli):
    status, out, _err = cli("run", "--json", "--mode", FULL_ACCESS, "--", "echo", "hello")
    assert status == 0
    result = json.loads(out)
    assert sorted(result) == sorted(
        [
            "action_id",
            "argv",
            "exit_code",
            "signal",
            "timed_out",
            "aborted",
            "duration_ms",
            "timeout_s",
            "stdout",
            "stderr",
            "sandbox",
            "classification",
            "decision",
            "limits",
            "limit_hit",
            "changes",
            "refused",
            "cwd",
            "quarantined",
            "restored",
            "landed",
            "conflicts",
        ]
    )
    assert sorted(result["limits"]) == ["cpu_seconds", "file_size_mb", "memory_mb", "processes"]
    assert sorted(result["stdout"]) == ["sha256", "spill_path", "text", "total_bytes", "truncated"]
    assert sorted(result["sandbox"]) == [
        "denied",
        "enforcement",
        "hidden",
        "missing",
        "mode",
        "protection",
        "provider",
        "runner_failed",
        "stale",
        "writes",
    ]


def test_cli_json_error_keys(cli, monkeypatch):
    monkeypatch.setenv("STOCKADE_DISABLE_PLUGINS", "bubblewrap,landlock")  # no sandbox provider
    status, out, _err = cli("run", "--json", "--", "echo", "hello")
    assert status == 125
    assert sorted(json.loads(out)["error"]) == ["code", "details", "hint", "message"]


# --- the local executor, as local-executor.md describes it --------------------------------


def test_a_trapped_timeout_keeps_both_facts(make_host, tmp_path):
    host = make_host(allow_all=True)
    script = "trap 'exit 0' TERM; sleep 5 & wait"
    result = host.run(
        ExecRequest(["sh", "-c", script], str(tmp_path), mode=FULL_ACCESS, timeout=0.3)
    )
    assert (result.timed_out, result.exit_code, result.signal) == (True, 0, None)
    assert not result.ok


def test_truncated_output_keeps_head_tail_and_a_private_spill_file(make_host, tmp_path):
    spill_parent = tmp_path / "spill"
    spill_parent.mkdir()
    config = Config(
        output=OutputConfig(limit=100),
        plugins=PluginsConfig(settings={"local": {"spill_dir": str(spill_parent)}}),
    )
    host = make_host(allow_all=True, config=config)
    result = host.run(ExecRequest(["seq", "1", "1000"], str(tmp_path), mode=FULL_ACCESS))
    whole = "".join(f"{n}\n" for n in range(1, 1001)).encode()
    out = result.stdout
    assert out.truncated
    assert out.total_bytes == len(whole)
    assert out.sha256 == hashlib.sha256(whole).hexdigest()
    assert out.text.startswith(whole[:50].decode())
    assert out.text.endswith(whole[-50:].decode())
    assert "bytes omitted from the middle" in out.text
    assert out.spill_path is not None
    spill = Path(out.spill_path)
    assert spill.read_bytes() == whole
    assert spill.parent.parent == spill_parent
    assert spill.parent.stat().st_mode & 0o777 == 0o700
    assert spill.stat().st_mode & 0o777 == 0o600
