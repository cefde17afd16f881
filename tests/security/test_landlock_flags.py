"""A file's flags and a socket's name on protected paths under Landlock's supervisor: every
``ioctl`` of the ``chattr`` family, ``file_setattr``, and ``bind`` of a Unix socket (from
``socketpair``, which every command may make, and from ``socket`` with ``unix_sockets``),
each with its control on an ordinary file or name beside it; and the control that the
attack lands without the supervisor."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import struct

import pytest
from stockade_landlock import supervisor

from stockade.config.schema import Config, PluginsConfig
from stockade.conformance.ground import LIBC, PRELUDE

pytestmark = [
    pytest.mark.sandboxes("landlock"),
    pytest.mark.skipif(supervisor.unavailable() is not None, reason="no supervisor here"),
]

FS_IOC_GETFLAGS, FS_NODUMP_FL = 0x80086601, 0x40

ATTACK = (
    r"""
import ctypes, fcntl, json, os, socket, struct, sys
"""
    + LIBC
    + PRELUDE
    + r"""def setflags(fd, cmd):
    return lambda: fcntl.ioctl(fd, cmd, struct.pack("<i", 0x40))  # FS_NODUMP_FL
def fssetxattr(fd):
    def go():
        got = bytearray(28)
        fcntl.ioctl(fd, 0x801C581F, got)  # FS_IOC_FSGETXATTR
        struct.pack_into("<I", got, 0, struct.unpack_from("<I", got)[0] | 0x80)  # NODUMP
        fcntl.ioctl(fd, 0x401C5820, bytes(got))
    return go
def file_setattr(path):
    def go():
        attr = ctypes.create_string_buffer(struct.pack("<Q4I", 0x80, 0, 0, 0, 0), 24)
        call(libc.syscall(469, -100, path.encode(), attr, ctypes.c_size_t(24), 0))
    return go
def bind(name, make):
    def go():
        sock = make()
        sock.bind(name)
    return go
pair = lambda: socket.socketpair()[0]
unix = lambda: socket.socket(socket.AF_UNIX)
modes = [("pair", pair)] + ([("unix", unix)] if sys.argv[3] == "1" else [])
for tag, path, name in (("", sys.argv[1], sys.argv[2]), ("control_", sys.argv[4], sys.argv[5])):
    fd = os.open(path, os.O_RDONLY)
    attempt(tag + "setflags", setflags(fd, 0x40086602))
    attempt(tag + "setversion_ext4", setflags(fd, 0x40086604))  # EXT4_IOC_SETVERSION
    attempt(tag + "fssetxattr", fssetxattr(fd))
    attempt(tag + "file_setattr", file_setattr(path))
    folder = os.open(os.path.dirname(path), os.O_RDONLY)
    attempt(tag + "setflags_folder", setflags(folder, 0x40086602))
    for how, make in modes:
        attempt(f"{tag}bind_{how}", bind(name + how, make))
        attempt(f"{tag}bind_relative_{how}", bind(os.path.relpath(name + how + "2"), make))
print(json.dumps(out))
"""
)


def _flags(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        got = fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * 8)
    finally:
        os.close(fd)
    return struct.unpack_from("<i", got)[0]


def _plant(box):
    config = box.ws / ".git" / "config"
    config.parent.mkdir()
    (box.ws / ".git" / "hooks").mkdir()
    config.write_text("[core]\n")
    (box.ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    plain = box.ws / "plain.txt"
    plain.write_text("mine\n")
    return config, plain


def _run(host, box, *, unix: bool):
    config, plain = _plant(box)
    before = _flags(config), _flags(config.parent)
    hook = box.ws / ".git" / "hooks" / "pre-commit"
    args = (str(config), str(hook), "1" if unix else "0", str(plain), str(box.ws / "sock"))
    result = host.run(box.py(ATTACK, *args))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    return config, plain, before, out


@pytest.mark.parametrize("unix", [False, True], ids=["socketpair", "unix-sockets"])
def test_flags_and_sockets_on_protected_paths_are_refused(make_host, box, unix):
    settings = {"landlock": {"unix_sockets": unix}}
    host = make_host(
        allow_all=True, config=Config(sandbox="landlock", plugins=PluginsConfig(settings=settings))
    )
    config, plain, before, out = _run(host, box, unix=unix)
    controls = {k: v for k, v in out.items() if k.startswith("control_")}
    attacks = {k: v for k, v in out.items() if not k.startswith("control_")}
    assert set(controls.values()) == {"done"}, controls
    assert set(attacks.values()) == {"Read-only file system"}, attacks
    assert len(attacks) == (9 if unix else 7)
    assert (_flags(config), _flags(config.parent)) == before
    assert not list((box.ws / ".git" / "hooks").iterdir())
    assert _flags(plain) & FS_NODUMP_FL  # the controls landed
    made = os.lstat(box.ws / "sockpair")
    assert stat.S_ISSOCK(made.st_mode)
    assert stat.S_IMODE(made.st_mode) == 0o777 & ~0o022  # the command's umask


def test_without_the_supervisor_the_attack_lands(make_host, box):
    """The control of the attack: with ``supervise = false`` the flags change and the
    socket's name is made in ``.git/hooks`` (put back after the run)."""
    off = PluginsConfig(settings={"landlock": {"supervise": False}})
    host = make_host(allow_all=True, config=Config(sandbox="landlock", plugins=off))
    _config, _plain, _before, out = _run(host, box, unix=False)
    assert out["setflags"] == out["fssetxattr"] == out["bind_pair"] == "done", out


RACE = r"""
import ctypes, fcntl, json, os, socket, struct, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
protected, plain, hooks = sys.argv[1], sys.argv[2], sys.argv[3]
stop = False
# A second thread swaps what the call names while it waits for the supervisor: the
# descriptor's number (dup2 of the protected file onto it) and the socket's path (the bytes
# of the address rewritten in place).
guarded, ordinary = os.open(protected, os.O_RDONLY), os.open(plain, os.O_RDONLY)
target = os.dup(ordinary)
names = [b"ok%d" % i for i in range(400)]
address = ctypes.create_string_buffer(110)
def swap():
    flip = 0
    while not stop:
        os.dup2(guarded if flip else ordinary, target)
        path = (hooks.encode() + b"/evil" if flip else b"free") + b"\0"
        ctypes.memmove(ctypes.addressof(address) + 2, path, len(path))
        flip ^= 1
struct.pack_into("<H", address, 0, socket.AF_UNIX)
thread = threading.Thread(target=swap)
thread.start()
counts = {"ioctl_done": 0, "ioctl_refused": 0, "bind_done": 0, "bind_refused": 0}
bound = set()
# At least 400 rounds, and on until each call met both sides of the swap (a loaded machine
# may leave the swapping thread unscheduled for a while), for at most 20 s.
import time
i, deadline = 0, time.monotonic() + 20
while i < 400 or (not all(counts.values()) and time.monotonic() < deadline):
    i += 1
    try:
        fcntl.ioctl(target, 0x40086602, struct.pack("<i", 0x40))
        counts["ioctl_done"] += 1
    except OSError:
        counts["ioctl_refused"] += 1
    sock = socket.socketpair()[0]
    if libc.bind(sock.fileno(), address, 110) == 0:
        counts["bind_done"] += 1
        bound.add(sock.getsockname())
        if os.path.lexists("free"):
            os.unlink("free")
    else:
        counts["bind_refused"] += 1
    sock.close()
stop = True
thread.join()
counts["bound"] = sorted(n if isinstance(n, str) else os.fsdecode(n) for n in bound)
print(json.dumps(counts))
"""


def test_a_racing_thread_never_gets_a_flag_or_a_socket_onto_a_protected_path(make_host, box):
    """Two threads: one calls ``FS_IOC_SETFLAGS`` on descriptor N and ``bind`` with one
    address buffer, 400 times at least and on until each call met both sides; the other
    swaps N for the protected file's descriptor (``dup2``) and rewrites the buffer to a path
    in ``.git/hooks``. The supervisor takes the file and reads the address once: both kinds
    land on the ordinary file and name, neither ever on the protected ones."""
    config, plain = _plant(box)
    before = _flags(config)
    host = make_host(allow_all=True, config=Config(sandbox="landlock"))
    hooks = box.ws / ".git" / "hooks"
    result = host.run(box.py(RACE, str(config), str(plain), str(hooks)))
    assert result.exit_code == 0, result.stderr.text
    counts = json.loads(result.stdout.text)
    assert counts["ioctl_done"] and counts["ioctl_refused"], counts  # both sides were met
    assert counts["bind_done"] and counts["bind_refused"], counts
    assert not any("hooks" in name for name in counts["bound"]), counts["bound"]
    assert _flags(config) == before
    assert not list(hooks.iterdir())
