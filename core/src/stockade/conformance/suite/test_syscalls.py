"""The seccomp policy, attacked call by call with raw syscalls (x86_64 numbers)."""

from __future__ import annotations

import json
import signal

import pytest

from stockade.confine import seccomp
from stockade.confine.promises import Promise

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


@pytest.mark.promise(Promise.SECCOMP)
def test_every_denied_syscall_is_attacked():
    attacked = {name for name, *_ in CALLS}
    assert set(seccomp.DENIED) <= attacked | {"process_vm_readv"}  # readv: test_processes


@pytest.mark.promise(Promise.SECCOMP)
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


@pytest.mark.promise(Promise.SECCOMP)
@pytest.mark.parametrize("source", [X32, I386], ids=["x32", "i386"])
def test_foreign_syscall_tables_kill_the_process(host, box, source):
    result = host.run(box.py(source))
    assert result.stdout.text == "before\n", result.stderr.text
    # A runner's init (bwrap) reports the death as 128+N; the executor's own child, the signal.
    assert (result.exit_code, result.signal) in ((128 + signal.SIGSYS, None), (None, "SIGSYS"))
