"""Ways a command points git at hooks of its own without writing a protected name: a
``commondir`` file (git then reads hooks and config from the folder it names), in a bare
repository that was there before the run or in a new folder that completes a repository
only through it; and a file the person's ``.git/config`` includes, given a
``core.hooksPath``. After the run, git in the person's repository runs no hook of the
command's, on both backends. Each control makes the same files outside any sandbox and sees
the hook run: the test sees a breach when there is one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stockade.config.schema import Config
from stockade.errors import SandboxUnavailable

from .conftest import PYTHON

# Makes C, a repository's common part without HEAD (objects, refs, a live hook, config);
# then points argv[2] at it with a commondir file (and gives argv[2] a HEAD if it has none).
REDIRECT = r"""
import json, os, sys
canary, folder = sys.argv[1], sys.argv[2]
out = {}
def attempt(name, fn):
    try:
        fn(); out[name] = "done"
    except OSError as e:
        out[name] = e.strerror
def write(path, text, mode=0o644):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    os.write(fd, text.encode()); os.close(fd)
hook = "#!/bin/sh\necho HOOK-RAN >> " + canary + "\n"
for part in ("C/objects", "C/refs/heads", "C/hooks", folder):
    os.makedirs(part, exist_ok=True)
write("C/hooks/pre-commit", hook, 0o755)
write("C/config", "[core]\n\trepositoryformatversion = 0\n\tbare = true\n")
attempt("commondir", lambda: write(folder + "/commondir", "../C\n"))
if not os.path.exists(folder + "/HEAD"):
    attempt("head", lambda: write(folder + "/HEAD", "ref: refs/heads/main\n"))
print(json.dumps(out))
"""

INCLUDED = r"""
import os, sys
os.makedirs("tools/h")
with open("tools/h/pre-commit", "w") as f:
    f.write("#!/bin/sh\necho HOOK-RAN >> " + sys.argv[1] + "\n")
os.chmod("tools/h/pre-commit", 0o755)
try:
    with open("team.gitconfig", "a") as f:
        f.write("[core]\n\thooksPath = " + os.getcwd() + "/tools/h\n")
    print("written")
except OSError as e:
    print(e.strerror)
"""


def _git(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd)}
    return subprocess.run(
        ["git", *argv], cwd=cwd, capture_output=True, text=True, env=env, check=False
    )


def _hook_runs(repo: Path, canary: Path) -> bool:
    _git("hook", "run", "--ignore-missing", "pre-commit", cwd=repo)
    return canary.exists()


def _direct(script: str, ws: Path, *args: str) -> None:
    """The control: the same script outside any sandbox."""
    subprocess.run([sys.executable, "-c", script, *args], cwd=ws, check=True, capture_output=True)


@pytest.mark.parametrize("where", ["bare", "split"])
def test_a_commondir_never_brings_the_commands_hooks(make_host, box, where):
    """``bare``: a bare repository made before the run gets a ``commondir``; ``split``: a
    new folder completes a repository only through one (``HEAD`` and ``commondir``)."""
    for ws in (box.ws, box.outside / "control"):
        ws.mkdir(exist_ok=True)
        if where == "bare":
            _git("init", "-q", "--bare", "B", cwd=ws)
    folder = "B" if where == "bare" else "F"
    control = box.outside / "control"
    _direct(REDIRECT, control, str(box.outside / "control-ran"), folder)
    assert _hook_runs(control / folder, box.outside / "control-ran")  # the breach, seen

    host = make_host(allow_all=True, config=Config(sandbox=box.sandbox))
    canary = box.outside / "ran"
    result = host.run(box.py(REDIRECT, str(canary), folder))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    repo = box.ws / folder
    assert not (repo / "commondir").exists(), (out, result.quarantined)
    if repo.exists():
        assert not _hook_runs(repo, canary), out
    assert not canary.exists()


def test_a_file_the_config_includes_is_kept_like_the_config(make_host, box):
    """The person's ``.git/config`` includes ``../team.gitconfig``: a command cannot give
    it a ``core.hooksPath``; one that includes a missing file is not run at all."""
    for ws in (box.ws, box.outside / "control"):
        ws.mkdir(exist_ok=True)
        _git("init", "-q", cwd=ws)
        (ws / "team.gitconfig").write_text("[user]\n\tname = team\n")
        with (ws / ".git" / "config").open("a") as f:
            f.write('[includeIf "gitdir:/"]\n\tpath = ../team.gitconfig\n')
    control = box.outside / "control"
    _direct(INCLUDED, control, str(box.outside / "control-ran"))
    assert _hook_runs(control, box.outside / "control-ran")  # the breach, seen

    host = make_host(allow_all=True, config=Config(sandbox=box.sandbox))
    canary = box.outside / "ran"
    result = host.run(box.py(INCLUDED, str(canary)))
    assert "hooksPath" not in (box.ws / "team.gitconfig").read_text(), result.stdout.text
    assert not _hook_runs(box.ws, canary)

    (box.ws / "team.gitconfig").unlink()  # a missing include: the command could make it
    with pytest.raises(SandboxUnavailable, match=r"team\.gitconfig"):
        host.run(box.request([PYTHON, "-c", "pass"]))
