"""The seccomp policy, attacked call by call with raw syscalls (x86_64 numbers)."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys

import pytest

from stockade.config.schema import Config, PluginsConfig
from stockade.confine import seccomp

from .conftest import PYTHON

RAW = """
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
out = {}
for name, nr, args in json.loads(sys.argv[1]):
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    out[name] = "ok" if rc >= 0 else os.strerror(ctypes.get_errno())
print(json.dumps(out))
"""

EPERM = "Operation not permitted"
# name, x86_64 number, arguments, expected errno message (None: allowed, a control).
CALLS = [
    ("ptrace", 101, [0, 0, 0, 0], EPERM),
    ("process_vm_writev", 311, [1, 0, 0, 0, 0, 0], EPERM),
    ("io_uring_setup", 425, [1, 0], EPERM),
    ("io_uring_enter", 426, [0, 0, 0, 0, 0, 0], EPERM),
    ("io_uring_register", 427, [0, 0, 0, 0], EPERM),
    ("keyctl", 250, [0, 0, 0, 0, 0], EPERM),
    ("add_key", 248, [0, 0, 0, 0, 0], EPERM),
    ("request_key", 249, [0, 0, 0, 0], EPERM),
    ("bpf", 321, [0, 0, 0], EPERM),
    ("perf_event_open", 298, [0, 0, 0, 0, 0], EPERM),
    ("userfaultfd", 323, [0], EPERM),
    ("kexec_load", 246, [0, 0, 0, 0], EPERM),
    ("kexec_file_load", 320, [0, 0, 0, 0, 0], EPERM),
    ("init_module", 175, [0, 0, 0], EPERM),
    ("finit_module", 313, [0, 0, 0], EPERM),
    ("delete_module", 176, [0, 0], EPERM),
    ("unshare", 272, [0x10000000], EPERM),
    ("setns", 308, [0, 0], EPERM),
    ("mount", 165, [0, 0, 0, 0, 0], EPERM),
    ("umount2", 166, [0, 0], EPERM),
    ("pivot_root", 155, [0, 0], EPERM),
    ("chroot", 161, [0], EPERM),
    ("fsopen", 430, [0, 0], EPERM),
    ("fsconfig", 431, [0, 0, 0, 0, 0], EPERM),
    ("fsmount", 432, [0, 0, 0], EPERM),
    ("fspick", 433, [0, 0, 0], EPERM),
    ("move_mount", 429, [0, 0, 0, 0, 0], EPERM),
    ("open_tree", 428, [0, 0, 0], EPERM),
    ("mount_setattr", 442, [0, 0, 0, 0, 0], EPERM),
    ("open_by_handle_at", 304, [0, 0, 0], EPERM),
    ("name_to_handle_at", 303, [0, 0, 0, 0, 0], EPERM),
    ("pidfd_getfd", 438, [0, 0, 0], EPERM),
    ("process_madvise", 440, [0, 0, 0, 0, 0], EPERM),
    ("process_mrelease", 448, [0, 0], EPERM),
    ("prlimit64_set_other", 302, [1, 7, 1, 0], EPERM),
    ("prlimit64_set_other_high_bits", 302, [1 << 32, 7, 1, 0], EPERM),  # refused: a 64-bit test
    # Our own (pid 0) passes the filter; the kernel refuses the bad pointer.
    ("prlimit64_set_self_control", 302, [0, 7, 1, 0], "Bad address"),
    ("clone_newuser", 56, [0x10000000 | 17, 0, 0, 0, 0], EPERM),
    ("clone_newnet", 56, [0x40000000 | 17, 0, 0, 0, 0], EPERM),
    ("clone3", 435, [0, 0], "Function not implemented"),
    ("personality_no_aslr", 135, [0x0040000], EPERM),
    ("personality_no_aslr_masked", 135, [0xF0040001], EPERM),
    ("personality_read_implies_exec", 135, [0x0400000], EPERM),
    ("personality_query", 135, [0xFFFFFFFF], None),
    ("socket_unix", 41, [1, 1, 0], EPERM),
    ("socket_inet", 41, [2, 1, 0], EPERM),
    ("socket_inet6", 41, [10, 1, 0], EPERM),
    ("socket_inet_high_bits", 41, [0x1_0000_0002, 1, 0], EPERM),
    ("socket_packet", 41, [17, 3, 0], EPERM),
    ("socket_vsock", 41, [40, 1, 0], EPERM),
    ("socket_huge_family", 41, [1 << 20, 1, 0], EPERM),
    ("socket_netlink", 41, [16, 3, 0], None),
    ("socketpair_inet", 53, [2, 1, 0, 0], EPERM),
    ("socketpair_inet_mptcp", 53, [2, 1, 262, 0], EPERM),
    ("socketpair_tipc", 53, [30, 5, 0, 0], EPERM),
    ("socketpair_unix_high_bits", 53, [0x1_0000_0002, 1, 0, 0], EPERM),
    # AF_UNIX passes the filter and reaches the kernel, which refuses the null pointer.
    ("socketpair_unix_control", 53, [1, 1, 0, 0], "Bad address"),
    ("getpid_control", 39, [], None),
]


def test_every_denied_syscall_is_attacked():
    attacked = {name for name, *_ in CALLS}
    assert set(seccomp.DENIED) <= attacked | {"process_vm_readv"}  # readv: test_processes


def test_the_filter_refuses_each_call(host, box, mode):
    calls = [(name, nr, args) for name, nr, args, _ in CALLS]
    result = host.run(box.py(RAW, json.dumps(calls), mode=mode))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    for name, _nr, _args, expected in CALLS:
        if expected is None:
            assert out[name] == "ok", (name, out[name])
        else:
            assert out[name] == expected, (name, out[name])


X32 = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
print("before", flush=True)
libc.syscall(ctypes.c_long(0x40000000 | 39))  # getpid through the x32 table
print("survived", flush=True)
"""

I386 = """
import ctypes, mmap, sys
# mov eax, 20 (getpid in the i386 table); int 0x80; ret
code = bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3])
buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(code)
address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
print("before", flush=True)
ctypes.CFUNCTYPE(ctypes.c_int)(address)()
print("survived", flush=True)
"""


@pytest.mark.parametrize("source", [X32, I386], ids=["x32", "i386"])
def test_foreign_syscall_tables_kill_the_process(host, box, source):
    result = host.run(box.py(source))
    assert result.stdout.text == "before\n", result.stderr.text
    if box.sandbox == "bubblewrap":  # bwrap's init reports the death as 128+N
        assert (result.exit_code, result.signal) == (128 + signal.SIGSYS, None)
    else:
        assert (result.exit_code, result.signal) == (None, "SIGSYS")


def test_the_compiled_program_is_cached_privately(tmp_path):
    cache = tmp_path / "cache"
    first = seccomp.bpf_program(network=True, unix=True, cache_dir=str(cache))
    files = list(cache.iterdir())
    assert len(files) == 1
    assert files[0].stat().st_mode & 0o777 == 0o600
    assert cache.stat().st_mode & 0o777 == 0o700
    assert seccomp._read_cache(str(files[0])) == first
    files[0].chmod(0o644)  # a cache file others could have written is not trusted
    assert seccomp._read_cache(str(files[0])) is None
    files[0].chmod(0o600)
    files[0].write_bytes(b"short")
    assert seccomp._read_cache(str(files[0])) is None


UNIX_SOCKET = """
import socket
try:
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
    print("unix socket made")
except OSError as error:
    print("refused", error.errno)
"""

POISON = """
import os, sys
path = sys.argv[1]
ALLOW_ALL = bytes([6, 0, 0, 0, 0, 0, 0xFF, 0x7F])  # one instruction: ret SECCOMP_RET_ALLOW
def overwrite():
    with open(path, "wb") as f:
        f.write(ALLOW_ALL)
def replace():
    with open(path + ".new", "wb") as f:
        f.write(ALLOW_ALL)
    os.replace(path + ".new", path)
def unlink():
    os.unlink(path)
for attempt in (overwrite, replace, unlink):
    try:
        attempt()
        print("changed")
    except OSError as error:
        print("refused", error.strerror)
"""


def test_a_command_cannot_poison_a_filter_cache_inside_its_workspace(make_host, box):
    """The cache lies in the workspace: a command that rewrote it would disarm the next run."""
    cache = box.ws / "cache"
    config = Config(
        sandbox=box.sandbox,
        plugins=PluginsConfig(settings={box.sandbox: {"seccomp_cache": str(cache)}}),
    )
    host = make_host(allow_all=True, config=config)
    (box.ws / "work").mkdir()  # under Landlock the top level, above the cache, takes no new files
    control = host.run(box.py("open('work/written', 'w').write('ok')"))
    assert control.exit_code == 0 and (box.ws / "work" / "written").read_text() == "ok"
    (program,) = cache.iterdir()
    before = program.read_bytes()
    result = host.run(box.py(POISON, str(program)))
    assert "changed" not in result.stdout.text, result.stdout.text
    assert result.stdout.text.count("refused") == 3
    assert program.read_bytes() == before
    # A fresh host in a fresh process reads the cache again: the filter still holds.
    fresh = subprocess.run(
        [sys.executable, "-c", FRESH_RUN, str(box.ws), str(cache), str(box.home), box.sandbox],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert fresh.stdout.strip() == f"refused {errno.EPERM}", fresh.stderr


FRESH_RUN = f"""
import sys
from stockade.config.schema import Config, PluginsConfig
from stockade.host import Host
from stockade.testing import AllowAll
from stockade.request.spec import ExecRequest
ws, cache, home, sandbox = sys.argv[1:]
settings = {{sandbox: {{"seccomp_cache": cache}}}}
config = Config(sandbox=sandbox, plugins=PluginsConfig(settings=settings))
with Host(config, plugins=[AllowAll()]) as host:
    argv = ["{PYTHON}", "-S", "-c", {UNIX_SOCKET!r}]
    result = host.run(ExecRequest(argv, ws, mode="workspace-write", env={{"HOME": home}}))
    print(result.stdout.text.strip())
"""


def test_without_pyseccomp_the_sandbox_is_unavailable_not_a_crash(box):
    code = f"""
import sys
sys.modules["pyseccomp"] = None  # as if it were not installed
from stockade.config.schema import Config, PluginsConfig
from stockade.errors import SandboxUnavailable
from stockade.host import Host
from stockade.testing import AllowAll
from stockade.request.spec import ExecRequest
settings = {{{box.sandbox!r}: {{"seccomp_cache": ""}}}}
config = Config(sandbox={box.sandbox!r}, plugins=PluginsConfig(settings=settings))
with Host(config, plugins=[AllowAll()]) as host:
    probe = host.sandboxes.get({box.sandbox!r}).probe()
    print("probe", probe.usable, probe.detail)
    try:
        host.run(ExecRequest(["true"], {str(box.ws)!r}, mode="workspace-write"))
    except SandboxUnavailable as error:
        print("unavailable", error.message)
"""
    env = {**os.environ, "XDG_CACHE_HOME": str(box.home / "empty-cache")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("probe False") and "pyseccomp is not installed" in lines[0]
    assert lines[1].startswith("unavailable") and "pyseccomp is not installed" in lines[1]


def test_the_filter_descriptor_is_sealed():
    fd = seccomp.program_fd(network=False)
    try:
        with pytest.raises(PermissionError):
            os.write(fd, b"\0" * 8)
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)
