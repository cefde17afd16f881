"""Extended attributes and times of protected files under Landlock's supervisor: every call
(path, ``l``, ``f``, ``at`` forms, ``utimensat`` on a descriptor, ``utime``, ``utimes``,
``futimesat``), each with its control on an ordinary file beside it; and the control that
the attack sees the change without the supervisor."""

from __future__ import annotations

import json
import os

import pytest
from stockade_landlock import supervisor

from stockade.config.schema import Config, PluginsConfig
from stockade.conformance.ground import LIBC, PRELUDE

pytestmark = [
    pytest.mark.sandboxes("landlock"),
    pytest.mark.skipif(supervisor.unavailable() is not None, reason="no supervisor here"),
]

ATTACK = (
    r"""
import ctypes, json, os, struct, sys
"""
    + LIBC
    + PRELUDE
    + r"""class Args(ctypes.Structure):
    _fields_ = [("value", ctypes.c_uint64), ("size", ctypes.c_uint32), ("flags", ctypes.c_uint32)]
value = ctypes.create_string_buffer(b"PWNED")
def setxattrat(path):
    args = Args(ctypes.addressof(value), 5, 0)
    at, no, size = ctypes.c_long(-100), ctypes.c_uint(0), ctypes.c_size_t(16)
    key, how = b"user.x", ctypes.byref(args)
    return lambda: call(libc.syscall(463, at, path.encode(), no, key, how, size))
old = (1_000_000_000, 1_000_000_000)
for tag, path in (("", sys.argv[1]), ("control_", sys.argv[2])):
    fd = os.open(path, os.O_RDONLY)
    attempt(tag + "setxattr", lambda: os.setxattr(path, "user.x", b"PWNED"))
    attempt(tag + "lsetxattr", lambda: os.setxattr(path, "user.x", b"PWNED", follow_symlinks=False))
    attempt(tag + "fsetxattr", lambda: os.setxattr(fd, "user.x", b"PWNED"))
    attempt(tag + "removexattr", lambda: os.removexattr(path, "user.keep"))
    attempt(tag + "fremovexattr", lambda: os.removexattr(fd, "user.keep2"))
    attempt(tag + "utimensat", lambda: os.utime(path, old))
    attempt(tag + "futimens", lambda: os.utime(fd, old))
    attempt(tag + "utimensat_now", lambda: os.utime(path))
    attempt(tag + "utime", lambda: call(libc.utime(path.encode(), struct.pack("<qq", *old))))
    tv = struct.pack("<qqqq", old[0], 0, old[1], 0)
    attempt(tag + "utimes", lambda: call(libc.utimes(path.encode(), tv)))
    attempt(tag + "futimesat", lambda: call(libc.futimesat(-100, path.encode(), None)))
    attempt(tag + "setxattrat", setxattrat(path))
print(json.dumps(out))
"""
)


def _plant(box):
    hook = box.ws / ".git" / "hooks" / "pre-commit"
    hook.parent.mkdir(parents=True)
    (box.ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    plain = box.ws / "plain.txt"
    for path in (hook, plain):
        path.write_text("#!/bin/sh\necho mine\n")
        os.setxattr(path, "user.keep", b"mine")
        os.setxattr(path, "user.keep2", b"mine")
    return hook, plain


def _facts(path):
    info = os.stat(path)
    return info.st_mtime_ns, info.st_atime_ns, sorted(os.listxattr(path))


def test_xattrs_and_times_of_a_protected_file_are_refused(host, box):
    hook, plain = _plant(box)
    before = _facts(hook)
    result = host.run(box.py(ATTACK, str(hook), str(plain)))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    controls = {k: v for k, v in out.items() if k.startswith("control_")}
    assert set(controls.values()) == {"done"} or _no_setxattrat(controls), controls
    attacks = {k: v for k, v in out.items() if not k.startswith("control_")}
    refused = {"Read-only file system", "Operation not permitted", "Function not implemented"}
    assert set(attacks.values()) <= refused, attacks
    assert attacks["setxattr"] == attacks["utimensat"] == "Read-only file system"
    assert _facts(hook) == before
    assert os.getxattr(plain, "user.x") == b"PWNED"  # the controls landed
    assert os.stat(plain).st_mtime_ns != before[0]


def _no_setxattrat(controls):
    """``setxattrat`` (Linux 6.13) is unknown to a kernel before it, or refused by the
    shared seccomp policy: the one control that may not land."""
    return {k for k, v in controls.items() if v != "done"} == {"control_setxattrat"}


def test_without_the_supervisor_the_attack_lands(make_host, box):
    """The control of the attack: with ``supervise = false`` it changes the hook's times
    and attributes (put back after the run only as bytes and times, never attributes)."""
    hook, plain = _plant(box)
    off = PluginsConfig(settings={"landlock": {"supervise": False}})
    host = make_host(allow_all=True, config=Config(sandbox="landlock", plugins=off))
    result = host.run(box.py(ATTACK, str(hook), str(plain)))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    assert out["setxattr"] == out["utimensat"] == "done", out
