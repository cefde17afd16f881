"""Real work still works inside: git, venv, pip from a local wheel, make, pipes."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from .conftest import PYTHON


def _sh(box, script, **kw):
    return box.request(["sh", "-c", script], **kw)


def test_git_init_add_commit_in_a_fresh_workspace(host, box):
    (box.ws / "README").write_text("hello\n")
    script = (
        "git init -q && git add README && "
        "git -c user.name=agent -c user.email=agent@example.invalid commit -qm first && "
        "git log --format=%s"
    )
    result = host.run(_sh(box, script))
    assert result.exit_code == 0, result.stderr.text
    assert result.stdout.text == "first\n"
    # A .git the command made is quarantined after it: a person takes it back on purpose.
    assert result.quarantined == (str(box.ws / ".git"),)
    assert not (box.ws / ".git").exists() and (box.ws / "README").exists()
    again = host.run(_sh(box, "git status"))
    assert again.exit_code != 0 and "not a git repository" in again.stderr.text


def _wheel(directory):
    name = "stockade_demo-1.0-py3-none-any.whl"
    files = {
        "stockade_demo.py": b"VALUE = 42\n",
        "stockade_demo-1.0.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: stockade-demo\nVersion: 1.0\n"
        ),
        "stockade_demo-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append("stockade_demo-1.0.dist-info/RECORD,,")
    files["stockade_demo-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(directory / name, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)


def test_venv_and_pip_install_from_a_local_wheel(host, box):
    wheels = box.ws / "wheels"
    wheels.mkdir()
    _wheel(wheels)
    script = (
        f"{PYTHON} -m venv venv && "
        "venv/bin/python -m pip install -q --no-index --find-links wheels stockade-demo && "
        "venv/bin/python -c 'import stockade_demo; print(stockade_demo.VALUE)'"
    )
    result = host.run(_sh(box, script, env={"PIP_DISABLE_PIP_VERSION_CHECK": "1"}))
    assert result.exit_code == 0, result.stderr.text[-2000:]
    assert result.stdout.text.strip().endswith("42")


def test_make_and_pipes(host, box):
    (box.ws / "Makefile").write_text("out.txt: in.txt\n\tsort -r in.txt > out.txt\n")
    (box.ws / "in.txt").write_text("a\nc\nb\n")
    result = host.run(_sh(box, "make -s && printf 'x\\ny\\n' | tr a-z A-Z | head -1"))
    assert result.exit_code == 0, result.stderr.text
    assert result.stdout.text == "X\n"
    assert (box.ws / "out.txt").read_text() == "c\nb\na\n"


@pytest.mark.sandboxes("bubblewrap")  # bwrap's own facts: runner_failed comes from it
def test_cli_reports_the_facts_in_json(box):
    env = {**os.environ, "HOME": str(box.home), "XDG_CONFIG_HOME": str(box.root / "cfg")}
    env.pop("STOCKADE_CONFIG", None)
    env.pop("STOCKADE_DISABLE_PLUGINS", None)
    stockade = [sys.executable, "-c", "from stockade.cli import entry; entry()"]

    def run(*argv):
        proc = subprocess.run(
            [
                *stockade,
                "run",
                "--sandbox",
                "bubblewrap",
                "--mode",
                "workspace-write",
                "--json",
                "--yes",
                "--",
                *argv,
            ],
            cwd=box.ws,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return json.loads(proc.stdout)

    ok = run("sh", "-c", "echo hi > made.txt && cat made.txt")
    assert ok["exit_code"] == 0 and ok["stdout"]["text"] == "hi\n"
    assert ok["sandbox"] == {
        "provider": "bubblewrap",
        "mode": "workspace-write",
        "enforcement": "full",
        "missing": [],
        "denied": False,
        "runner_failed": False,
        "hidden": [],
    }
    denied = run("sh", "-c", f"echo x > {box.secret}")
    assert denied["exit_code"] != 0 and denied["sandbox"]["denied"] is True
    # A script whose #! interpreter exists nowhere: bwrap's execvp fails, not the command.
    script = box.ws / "orphan.sh"
    script.write_text("#!/nonexistent/stockade-interpreter\n")
    script.chmod(0o755)
    failed = run(str(script))
    assert failed["sandbox"]["runner_failed"] is True
    assert failed["stderr"]["text"].startswith("bwrap: ")
    # A program in the host's /tmp is not in the sandbox's private /tmp: refused before
    # bwrap starts (tests/security/test_hidden_paths.py has the rest).
    hidden = shutil.copy("/bin/true", "/tmp/stockade-test-true")
    try:
        refused = run(hidden)
    finally:
        os.unlink(hidden)
    assert refused["error"]["code"] == "spawn_failed"
    assert refused["error"]["details"]["folder"] == "/tmp"
