"""``no-setid``: no file a command writes reaches a writable root setuid or setgid.

A command run as root that copies a program into the workspace and makes it setuid-root
(``cp /bin/sh s; chmod 4755 s``) would leave a way to root for anyone who can reach the
folder; run as any user, a setuid program of that user's. Each way to set the bits is tried,
on a copy the command made and on a program the person had there before: ``chmod``,
``fchmod``, ``chmod`` through a symlink and through ``/proc/self/fd/N``, ``fchmodat`` from a
folder descriptor, a new file opened with the bits in its mode (and ``mknod``, and
``O_TMPFILE`` linked into place) then written, for ``S_ISUID``, ``S_ISGID`` and both. After
the run, no file of the workspace has either bit, whether the provider refused the calls or
cleared the bits as the files landed (a folder keeps a setgid bit: it only names a group).

The control runs the same script outside any sandbox, in a folder of its own, and finds the
bits set: the check can see a breach. An ordinary ``chmod`` (to ``0700``) works inside.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from stockade.confine.promises import Promise
from stockade.conformance.ground import PRELUDE

SETID = stat.S_ISUID | stat.S_ISGID

ATTACK = (
    r"""
import json, os, shutil, stat
"""
    + PRELUDE
    + r"""program = open("/bin/true", "rb").read()
def copy(name):
    with open(name, "wb") as f:
        f.write(program)
    os.chmod(name, 0o755)
    return name
def made(name, mode):
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    os.write(fd, program)
    os.close(fd)
def node(name, mode):
    os.mknod(name, stat.S_IFREG | mode)
    with open(name, "r+b") as f:
        f.write(program)
def tmpfile(name, mode):
    fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, mode)
    os.write(fd, program)
    os.link(f"/proc/self/fd/{fd}", name)
    os.close(fd)
def through_fd(name, mode):
    fd = os.open(copy(name), os.O_RDONLY)
    os.chmod(f"/proc/self/fd/{fd}", mode)
    os.close(fd)
def fchmod(name, mode):
    fd = os.open(copy(name), os.O_RDONLY)
    os.fchmod(fd, mode)
    os.close(fd)
def at(name, mode):
    copy(name)
    folder = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    os.chmod(name, mode, dir_fd=folder)
    os.close(folder)
def linked(name, mode):
    os.symlink(copy(name + ".real"), name)
    os.chmod(name, mode)
for bits in (0o4755, 0o2755, 0o6755):
    b = oct(bits)
    attempt("chmod-new-" + b, lambda: os.chmod(copy("new" + b), bits))
    attempt("chmod-old-" + b, lambda: os.chmod("old" + b, bits))
    attempt("fchmod-" + b, lambda: fchmod("fchmod" + b, bits))
    attempt("fd-path-" + b, lambda: through_fd("fdpath" + b, bits))
    attempt("fchmodat-" + b, lambda: at("at" + b, bits))
    attempt("symlink-" + b, lambda: linked("link" + b, bits))
    attempt("open-" + b, lambda: made("open" + b, bits))
    attempt("mknod-" + b, lambda: node("node" + b, bits))
    attempt("tmpfile-" + b, lambda: tmpfile("tmp" + b, bits))
attempt("control-chmod", lambda: os.chmod(copy("plain"), 0o700))
print(json.dumps(out))
"""
)


def _plant(folder: Path) -> None:
    """The person's own programs, there before the command (``old0o4755`` and the rest)."""
    for bits in (0o4755, 0o2755, 0o6755):
        old = folder / f"old{oct(bits)}"
        old.write_bytes(Path("/bin/true").read_bytes())
        old.chmod(0o755)


def _setid(folder: Path) -> dict[str, str]:
    """Every file below ``folder`` with a setuid or setgid bit, and its mode."""
    found = {}
    for entry in folder.rglob("*"):
        info = entry.lstat()
        if stat.S_ISREG(info.st_mode) and info.st_mode & SETID:
            found[str(entry.relative_to(folder))] = oct(stat.S_IMODE(info.st_mode))
    return found


@pytest.mark.promise(Promise.NO_SETID)
def test_no_file_lands_setuid_or_setgid(host, box, tmp_path):
    _plant(box.ws)
    result = host.run(box.py(ATTACK))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text.splitlines()[-1])
    assert out["control-chmod"] == "done", out
    assert stat.S_IMODE((box.ws / "plain").stat().st_mode) == 0o700  # ordinary chmod works
    assert not _setid(box.ws), (_setid(box.ws), out)
    # Control: the same script outside any sandbox leaves the bits (the check sees them).
    outside = tmp_path / "control"
    outside.mkdir()
    _plant(outside)
    python = box.py("pass").argv[0]
    shutil.copy("/bin/true", outside / "true")
    plain = subprocess.run(
        [python, "-S", "-c", ATTACK], cwd=outside, capture_output=True, text=True, check=True
    )
    control = json.loads(plain.stdout.splitlines()[-1])
    breach = _setid(outside)
    assert {"new0o4755", "old0o6755", "fchmod0o2755", "at0o4755"} <= set(breach), (
        breach,
        control,
    )
    assert os.geteuid() != 0 or breach["old0o4755"] == "0o4755", breach
