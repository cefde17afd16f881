"""Real work still works inside: git, venv, pip from a local wheel, make, pipes."""

from __future__ import annotations

import base64
import hashlib
import zipfile

import pytest

from stockade.confine.promises import Promise
from stockade.conformance.ground import PYTHON


def _sh(box, script, **kw):
    return box.request(["sh", "-c", script], **kw)


@pytest.mark.promise(Promise.ORDINARY_WORK)
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


@pytest.mark.promise(Promise.ORDINARY_WORK)
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


@pytest.mark.promise(Promise.ORDINARY_WORK)
def test_make_and_pipes(host, box):
    (box.ws / "Makefile").write_text("out.txt: in.txt\n\tsort -r in.txt > out.txt\n")
    (box.ws / "in.txt").write_text("a\nc\nb\n")
    result = host.run(_sh(box, "make -s && printf 'x\\ny\\n' | tr a-z A-Z | head -1"))
    assert result.exit_code == 0, result.stderr.text
    assert result.stdout.text == "X\n"
    assert (box.ws / "out.txt").read_text() == "c\nb\na\n"
