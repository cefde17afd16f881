"""The messages a newcomer met: each names what was wrong and what to do, with the paths."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from helpers.server import FULL, STOCKADE, stockade_for
from stockade.config.schema import Config, CredentialsConfig
from stockade.errors import ConfigError, CredentialUnavailable, UnsafeRoot
from stockade.request.spec import ExecRequest


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*STOCKADE, "--no-server", *args], capture_output=True, text=True, cwd=cwd, check=False
    )


@pytest.mark.parametrize("has_file", [False, True])
def test_a_missing_credential_names_its_variable_and_the_secrets_file(
    make_host, tmp_path, has_file
):
    file = None
    if has_file:
        secrets = tmp_path / "secrets.toml"
        secrets.write_text('other = "x"\n')
        secrets.chmod(0o600)
        file = str(secrets)
    config = Config(credentials=CredentialsConfig(file=file), source="/etc/x/stockade.toml")
    host = make_host(allow_all=True, config=config, environ={"PATH": "/usr/bin:/bin"})
    request = ExecRequest(["true"], str(tmp_path), mode=FULL, credentials={"TOKEN": "gh-app"})
    with pytest.raises(CredentialUnavailable) as caught:
        host.run(request)
    hint = caught.value.hint or ""
    assert "set STOCKADE_SECRET_GH_APP in the environment" in hint
    if file is None:
        assert "credentials.file in the config /etc/x/stockade.toml" in hint
    else:
        assert f'add gh-app = "..." to the secrets file {file}' in hint


def test_a_hint_about_the_config_gives_its_path_or_where_to_make_one() -> None:
    with pytest.raises(ConfigError) as caught:
        Config(source="/home/me/stockade.toml").profile("buidler")
    assert "add [agents.buidler] to the config /home/me/stockade.toml" in (caught.value.hint or "")
    with pytest.raises(ConfigError) as caught:
        Config().profile("buidler")
    assert "make ~/.config/stockade/config.toml" in (caught.value.hint or "")


def test_doctor_with_a_config_error_says_so(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text("[timeout]\ndefualt = 3\n")
    done = cli("--config", "bad.toml", "doctor", cwd=tmp_path)
    assert done.returncode == 1
    assert "config: bad.toml (unusable)" in done.stdout
    assert "unknown key 'defualt' @ $.timeout" in done.stdout
    assert done.stdout.rstrip().endswith(
        "verdict: NOT ready: the config bad.toml cannot be used: fix it, then run doctor again"
    )
    assert "cannot run confined" not in done.stdout


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["--yes", "run", "--", "true"], "--yes belongs after the command word: `stockade run"),
        (["--json", "pending"], "--json belongs after the command word:"),
        (["run", "--yse", "--", "true"], "did you mean --yes?"),
        (["run", "--jsno", "--", "true"], "did you mean --json?"),
        (["rnu", "--", "true"], "did you mean `stockade run`?"),
        (["pendign"], "did you mean `stockade pending`?"),
    ],
)
def test_a_misplaced_or_misspelled_word_gets_a_suggestion(tmp_path, argv, hint) -> None:
    done = cli(*argv, cwd=tmp_path)
    assert done.returncode == 125
    assert f"  hint: {hint}" in done.stderr, done.stderr


def test_the_command_lines_task_hints_name_stockade_tasks(tmp_path: Path) -> None:
    with stockade_for(tmp_path) as sk:
        done = sk.run("kill", "task-9")
        assert done.returncode != 0
        assert "no task 'task-9'" in done.stderr.decode()
        assert "hint: `stockade tasks` shows this session's tasks" in done.stderr.decode()
        assert "list_commands" not in done.stderr.decode()
        done = sk.run("run", "--yes", "--mode", FULL, "--", "true")
        assert done.returncode == 0


def test_mcps_unsafe_root_hint_speaks_to_a_model() -> None:
    from stockade_mcp.results import failure

    error = UnsafeRoot("refusing /home/me as a writable root (workspace): it is a home")
    error.hint = "work in a project folder (cd into it or pass --cwd; ...), or --agent NAME"
    result = failure(error)
    hint = str(result.structured_content["hint"])  # type: ignore[index]
    assert "--cwd" not in hint and "--agent" not in hint and "cd into" not in hint
    assert hint.startswith("you cannot choose where commands may write")
