"""A ``core.hooksPath`` folder that is not there yet (an attack review's finding): the
repository's config, or the person's own (a relative ``core.hooksPath`` there names a
folder in every repository), points git at a folder the command can make, with a hook in
it that the person's next ``git commit`` runs outside any sandbox (or the environment's
config: ``GIT_CONFIG_COUNT``, ``GIT_CONFIG_PARAMETERS``). Nothing lands at or
beneath such a folder: it is quarantined, as a ``.git/hooks`` would be. The control: the
same script run outside the sandbox plants a hook that git runs. Landlock's supervisor
refuses the folder while the command runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stockade.config.schema import Config

PLANT = r"""
import os, sys
os.makedirs(sys.argv[1], exist_ok=True)
hook = os.path.join(sys.argv[1], "pre-commit")
with open(hook, "w") as f:
    f.write("#!/bin/sh\necho HOOK-RAN >> " + sys.argv[2] + "\n")
os.chmod(hook, 0o755)
"""


def _git(*argv: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(home)}
    env.pop("GIT_CONFIG_GLOBAL", None)
    env.pop("XDG_CONFIG_HOME", None)
    return subprocess.run(
        ["git", *argv], cwd=cwd, capture_output=True, text=True, env=env, check=False
    )


def _repository(ws: Path, home: Path, where: str) -> None:
    _git("init", "-q", str(ws), cwd=ws, home=home)
    if where == "repository":
        _git("config", "core.hooksPath", "githooks", cwd=ws, home=home)
    elif where == "personal":  # the person's own config, relative: a folder in every repository
        (home / ".gitconfig").write_text("[core]\n\thooksPath = githooks\n")
    # (else the environment: the test set it for the host and the person's git alike)


def _environment(monkeypatch, where: str) -> None:
    """Config in the environment, as the person's shell (or a ``git -c`` above) gives it."""
    if where == "GIT_CONFIG_COUNT":
        monkeypatch.setenv("GIT_CONFIG_COUNT", "2")
        monkeypatch.setenv("GIT_CONFIG_KEY_0", "user.name")
        monkeypatch.setenv("GIT_CONFIG_VALUE_0", "someone")
        monkeypatch.setenv("GIT_CONFIG_KEY_1", "core.hooksPath")
        monkeypatch.setenv("GIT_CONFIG_VALUE_1", "githooks")
    elif where == "GIT_CONFIG_PARAMETERS":  # what `git -c core.hooksPath=githooks` passes on
        monkeypatch.setenv(
            "GIT_CONFIG_PARAMETERS", "'user.name'='some one' 'core.hooksPath'='githooks'"
        )


@pytest.mark.sandboxes("bubblewrap", "landlock")
@pytest.mark.parametrize(
    "where", ["repository", "personal", "GIT_CONFIG_COUNT", "GIT_CONFIG_PARAMETERS"]
)
@pytest.mark.parametrize("folder", ["githooks", "githooks/deeper/.."])
def test_a_hooks_folder_not_there_yet_lands_nothing(  # noqa: PLR0917 - fixtures
    box, make_host, sandbox, monkeypatch, tmp_path, where, folder
):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # the host reads the person's config from here
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    _environment(monkeypatch, where)
    _repository(box.ws, home, where)
    canary = tmp_path / "canary"
    host = make_host(allow_all=True, config=Config(sandbox=sandbox))
    result = host.run(box.py(PLANT, folder, str(canary)))
    if sandbox == "landlock":  # refused while it runs (its supervisor), as a .git/hooks
        assert result.exit_code != 0 and "Read-only file system" in result.stderr.text
    else:  # quarantined as it lands
        assert result.ok, result.stderr.text
        assert result.quarantined == (str(box.ws / "githooks"),)
    assert not (box.ws / "githooks").exists()
    _git("hook", "run", "--ignore-missing", "pre-commit", cwd=box.ws, home=home)
    assert not canary.exists()
    # The control: planted outside the sandbox, git runs it.
    subprocess.run([sys.executable, "-c", PLANT, folder, str(canary)], cwd=box.ws, check=True)
    _git("hook", "run", "--ignore-missing", "pre-commit", cwd=box.ws, home=home)
    assert canary.read_text() == "HOOK-RAN\n"


@pytest.mark.sandboxes("bubblewrap", "landlock")
@pytest.mark.parametrize("where", ["a repository to come", "a repository around the root"])
def test_a_hooks_folder_of_a_repository_that_is_not_in_the_root_lands_nothing(  # noqa: PLR0917
    box, make_host, sandbox, monkeypatch, tmp_path, where
):
    """No repository in the root yet, and the person's own relative ``core.hooksPath``
    (they run ``git init`` there after the command); or the root lies inside a repository
    whose ``core.hooksPath`` names a folder in it. The control: planted outside the
    sandbox, git runs the hook."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    if where == "a repository to come":
        (home / ".gitconfig").write_text("[core]\n\thooksPath = githooks\n")
        repository = box.ws
    else:
        repository = box.ws.parent
        _git("init", "-q", str(repository), cwd=repository, home=home)
        _git("config", "core.hooksPath", f"{box.ws.name}/githooks", cwd=repository, home=home)
    canary = tmp_path / "canary"
    host = make_host(allow_all=True, config=Config(sandbox=sandbox))
    result = host.run(box.py(PLANT, "githooks", str(canary)))
    if sandbox == "landlock":
        assert result.exit_code != 0 and "Read-only file system" in result.stderr.text
    else:
        assert result.ok, result.stderr.text
        assert result.quarantined == (str(box.ws / "githooks"),)
    assert not (box.ws / "githooks").exists()
    if where == "a repository to come":
        _git("init", "-q", str(repository), cwd=repository, home=home)
    _git("hook", "run", "--ignore-missing", "pre-commit", cwd=repository, home=home)
    assert not canary.exists()
    subprocess.run([sys.executable, "-c", PLANT, "githooks", str(canary)], cwd=box.ws, check=True)
    _git("hook", "run", "--ignore-missing", "pre-commit", cwd=repository, home=home)
    assert canary.read_text() == "HOOK-RAN\n"
