"""``no-setid``: no program a command writes reaches a writable root setuid, setgid or with
file capabilities, and no privileged program of the person's is rewritten.

A command run as root that copies a program into the workspace and makes it setuid-root
(``cp /bin/sh s; chmod 4755 s``) would leave a way to root for anyone who can reach the
folder; run as any user, a setuid program of that user's. Each way to get the bits is tried:

- set on a copy the command made and on a program the person had there before, by
  ``chmod``, ``fchmod``, ``chmod`` through a symlink and through ``/proc/self/fd/N``, and
  ``fchmodat`` from a folder descriptor, for ``S_ISUID``, ``S_ISGID`` and both;
- given at creation (``open``, ``mknod``, ``openat2``, ``O_TMPFILE`` linked into place),
  then written, or left empty;
- a setgid file made without group-execute (the kernel keeps that bit through writes),
  then made executable by an access ACL, with no ``chmod`` at all;
- a privileged program the person has there (setuid, setgid, and as root one with file
  capabilities) rewritten through a shared memory map, which keeps the bits and the
  capabilities where ``write`` drops them, renamed and linked.

After the run, every file of the workspace that is setuid, setgid or capable must be one
of the person's, byte for byte: the provider refused the calls, or cleared the bits as the
files landed (a folder may keep a setgid bit: it only names a group). The control runs the
same script outside any sandbox, in a folder of its own, and finds the breaches. An
ordinary ``chmod`` (to ``0700``) works inside.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import subprocess
from pathlib import Path

import pytest

from stockade.confine.promises import Promise
from stockade.conformance.ground import PRELUDE

SETID = stat.S_ISUID | stat.S_ISGID
CAPABILITY = "security.capability"
# VFS_CAP_REVISION_2 with CAP_NET_RAW (13) permitted and effective: ``setcap cap_net_raw+ep``.
NET_RAW = struct.pack("<IIIII", 0x02000000 | 1, 1 << 13, 0, 0, 0)
PLANTED = {"suid": 0o4755, "sgid": 0o2755, "both": 0o6755}
"""The person's own privileged programs, there before the command (``capable`` too, as
root: a program with file capabilities)."""

ATTACK = (
    r"""
import ctypes, json, mmap, os, stat, struct
libc = ctypes.CDLL(None, use_errno=True)
"""
    + PRELUDE
    + r"""program = open("/bin/true", "rb").read()
def check(rc):
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return rc
def copy(name):
    with open(name, "wb") as f:
        f.write(program)
    os.chmod(name, 0o755)
    return name
def made(name, mode, write=True):
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    if write:
        os.write(fd, program)
    os.close(fd)
def node(name, mode, write=True):
    os.mknod(name, stat.S_IFREG | mode)
    if write:
        with open(name, "r+b") as f:
            f.write(program)
def openat2(name, mode):
    how = struct.pack("<QQQ", os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode, 0)
    libc.syscall.restype = ctypes.c_long
    fd = check(libc.syscall(437, -100, name.encode(), how, len(how)))
    os.close(fd)
def tmpfile(name, mode, write=True):
    fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, mode)
    if write:
        os.write(fd, program)
    check(libc.linkat(-100, f"/proc/self/fd/{fd}".encode(), -100, name.encode(), 0x400))
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
def entry(tag, perm):
    return struct.pack("<HHI", tag, perm, 0xFFFFFFFF)
# u::rwx g::r-x o::r-x
EXECUTABLE = struct.pack("<I", 2) + entry(1, 7) + entry(4, 5) + entry(0x20, 5)
def acl(name, how):
    (made if how == "open" else node)(name, 0o2644)
    os.setxattr(name, "system.posix_acl_access", EXECUTABLE)
def mapped(name):
    with open(name, "r+b") as f:
        view = mmap.mmap(f.fileno(), 0)
        view[:6] = b"PWNED!"
        view.close()
for bits in (0o4755, 0o2755, 0o6755):
    b = oct(bits)
    attempt("chmod-new-" + b, lambda: os.chmod(copy("new" + b), bits))
    attempt("chmod-old-" + b, lambda: os.chmod("old" + b, bits))
    attempt("fchmod-" + b, lambda: fchmod("fchmod" + b, bits))
    attempt("fd-path-" + b, lambda: through_fd("fdpath" + b, bits))
    attempt("fchmodat-" + b, lambda: at("at" + b, bits))
    attempt("symlink-" + b, lambda: linked("link" + b, bits))
    attempt("open-" + b, lambda: made("open" + b, bits))
    attempt("open-empty-" + b, lambda: made("openempty" + b, bits, write=False))
    attempt("mknod-" + b, lambda: node("node" + b, bits))
    attempt("mknod-empty-" + b, lambda: node("nodeempty" + b, bits, write=False))
    attempt("openat2-" + b, lambda: openat2("openat2" + b, bits))
    attempt("tmpfile-" + b, lambda: tmpfile("tmp" + b, bits))
    attempt("tmpfile-empty-" + b, lambda: tmpfile("tmpempty" + b, bits, write=False))
attempt("acl-open", lambda: acl("aclopen", "open"))
attempt("acl-mknod", lambda: acl("aclnode", "mknod"))
for name in ("suid", "sgid", "both", "capable"):
    if os.path.exists(name):
        attempt("mmap-" + name, lambda: mapped(name))
        attempt("acl-" + name, lambda: os.setxattr(name, "system.posix_acl_access", EXECUTABLE))
        attempt("link-" + name, lambda: os.link(name, name + ".linked"))
        attempt("rename-" + name, lambda: os.rename(name, name + ".moved"))
attempt("control-chmod", lambda: os.chmod(copy("plain"), 0o700))
print(json.dumps(out))
"""
)


def plant(folder: Path) -> dict[str, bytes]:
    """The person's own files, there before the command: ``old*`` programs (``0755``) and
    the privileged ones of :data:`PLANTED` (and ``capable``, as root); each privileged one's
    content, by name."""
    program = Path("/bin/true").read_bytes()
    for bits in (0o4755, 0o2755, 0o6755):
        (folder / f"old{oct(bits)}").write_bytes(program)
        (folder / f"old{oct(bits)}").chmod(0o755)
    kept = {}
    for name, mode in PLANTED.items():
        (folder / name).write_bytes(program)
        (folder / name).chmod(mode)
        kept[name] = program
    if os.geteuid() == 0:
        (folder / "capable").write_bytes(program)
        (folder / "capable").chmod(0o755)
        os.setxattr(folder / "capable", CAPABILITY, NET_RAW)
        kept["capable"] = program
    return kept


def privileged(folder: Path, kept: dict[str, bytes]) -> dict[str, str]:
    """Every file below ``folder`` that is setuid, setgid or capable and is not one of the
    person's ``kept`` programs as it was; what it has."""
    found = {}
    for entry in folder.rglob("*"):
        info = entry.lstat()
        if not stat.S_ISREG(info.st_mode):
            continue
        name = str(entry.relative_to(folder))
        caps = _capable(entry)
        if not (info.st_mode & SETID or caps):
            continue
        if kept.get(name) == entry.read_bytes():
            continue  # the person's own, untouched
        found[name] = oct(stat.S_IMODE(info.st_mode)) + (" +caps" if caps else "")
    return found


def _capable(path: Path) -> bool:
    try:
        os.getxattr(path, CAPABILITY, follow_symlinks=False)
    except OSError:
        return False
    return True


@pytest.mark.promise(Promise.NO_SETID)
def test_no_file_lands_setuid_or_setgid(host, box, tmp_path):
    kept = plant(box.ws)
    result = host.run(box.py(ATTACK))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text.splitlines()[-1])
    assert out["control-chmod"] == "done", out
    assert stat.S_IMODE((box.ws / "plain").stat().st_mode) == 0o700  # ordinary chmod works
    assert not privileged(box.ws, kept), (privileged(box.ws, kept), out)
    # Control: the same script outside any sandbox leaves the breaches (the check sees them).
    outside = tmp_path / "control"
    outside.mkdir()
    kept = plant(outside)
    python = box.py("pass").argv[0]
    plain = subprocess.run(
        [python, "-S", "-c", ATTACK], cwd=outside, capture_output=True, text=True, check=True
    )
    control = json.loads(plain.stdout.splitlines()[-1])
    breach = privileged(outside, kept)
    seen = {"new0o4755", "old0o6755", "fchmod0o2755", "at0o4755", "aclopen", "aclnode"}
    assert seen <= set(breach), (breach, control)
    assert {"suid.moved", "both.moved"} <= set(breach), (breach, control)  # rewritten, kept
    if os.geteuid() == 0:
        assert breach["capable.moved"] == "0o755 +caps", breach
