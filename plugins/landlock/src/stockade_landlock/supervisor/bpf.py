"""The supervisor's seccomp filter, written as BPF by hand: which calls cost a notification.

A filter sees a call's registers, never the memory they point at, so it cannot tell where
a path leads. It sends the supervisor every call that creates, truncates, renames, links
or removes a path, or changes a file's mode, owner, extended attributes or times
(:mod:`.metadata`; by path or by descriptor: a
descriptor opened for reading can still be ``fchmod``-ed), every ``bind`` (a Unix socket's
name, :mod:`.sockets`), an ``ioctl`` only for the file-flag numbers of :mod:`.flags`, and
``umask`` (let through, :mod:`.views`); and every ``open``, ``openat``
and ``openat2``: an open for reading too, because a read of another process's ``/proc``
entry is one (the supervisor lets the kernel make a read-only ``open`` whose path does not
name ``/proc``, see :mod:`.processes`). Everything else passes this filter untouched (the
shared policy, a second filter, still judges it), so ``stat``, ``read`` or ``exec`` cost
nothing. The filter is stacked on the shared policy: the kernel takes the strictest
answer, and an ``EPERM`` of the policy wins over a notification.
"""

from __future__ import annotations

import struct

from .flags import FILE_SETATTR, IOCTLS
from .metadata import CALLS as _METADATA
from .views import CHANGES as _CHANGES

AUDIT_ARCH_X86_64 = 0xC000003E
RET_ALLOW = 0x7FFF0000
RET_USER_NOTIF = 0x7FC00000
RET_KILL_PROCESS = 0x80000000

# x86_64 numbers: the calls the supervisor decides whatever their arguments.
NOTIFIED: dict[str, int] = {
    "creat": 85,
    "openat2": 437,
    "mkdir": 83,
    "mkdirat": 258,
    "mknod": 133,
    "mknodat": 259,
    "symlink": 88,
    "symlinkat": 266,
    "link": 86,
    "linkat": 265,
    "unlink": 87,
    "unlinkat": 263,
    "rmdir": 84,
    "rename": 82,
    "renameat": 264,
    "renameat2": 316,
    "truncate": 76,
    "chmod": 90,
    "fchmod": 91,
    "fchmodat": 268,
    "fchmodat2": 452,
    "chown": 92,
    "fchown": 93,
    "lchown": 94,
    "fchownat": 260,
    "bind": 49,  # a Unix socket's name (:mod:`.sockets`)
    "file_setattr": FILE_SETATTR,  # a file's flags by path (:mod:`.flags`)
    **_METADATA,  # extended attributes and times
    **_CHANGES,  # umask: let through, the views forgotten (:mod:`.views`)
}
IOCTL = 16  # notified only for the numbers of :data:`.flags.IOCTLS` (a file's flags)
# ``open`` and ``openat``: number -> index of the flags argument (notified whatever they are).
OPENS: dict[str, tuple[int, int]] = {"open": (2, 1), "openat": (257, 2)}
# O_WRONLY, O_RDWR, O_CREAT, O_TRUNC, __O_TMPFILE: an open with none of these only reads.
WRITE_FLAGS = 0o1 | 0o2 | 0o100 | 0o1000 | 0o20000000

_LD_W_ABS, _JEQ_K, _RET_K = 0x20, 0x15, 0x06
_ARG1_LOW = 24  # offsetof(struct seccomp_data, args[1]), little-endian: its low word


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def program() -> bytes:
    """The filter: notify :data:`NOTIFIED`, :data:`OPENS` and an ``ioctl`` whose number is
    one of :data:`.flags.IOCTLS`; allow the rest; kill a call through a foreign table (the
    shared policy kills it too)."""
    always = sorted([*NOTIFIED.values(), *(nr for nr, _arg in OPENS.values())])
    numbers = sorted(IOCTLS)
    # 0 ld arch, 1 jeq arch, 2 ld nr, one jeq per notified call, jeq ioctl, ld its number
    # (the low word of args[1]), one jeq per number, then ALLOW, NOTIFY, KILL.
    allow = 3 + len(always) + 2 + len(numbers)
    notify, kill = allow + 1, allow + 2
    insns = [
        _insn(_LD_W_ABS, 0, 0, 4),
        _insn(_JEQ_K, 0, kill - 2, AUDIT_ARCH_X86_64),
        _insn(_LD_W_ABS, 0, 0, 0),
    ]
    for nr in always:
        insns.append(_insn(_JEQ_K, notify - len(insns) - 1, 0, nr))
    insns.append(_insn(_JEQ_K, 0, allow - len(insns) - 1, IOCTL))
    insns.append(_insn(_LD_W_ABS, 0, 0, _ARG1_LOW))
    for cmd in numbers:
        insns.append(_insn(_JEQ_K, notify - len(insns) - 1, 0, cmd))
    assert len(insns) == allow  # noqa: S101 - the jumps above count on it
    insns += [
        _insn(_RET_K, 0, 0, RET_ALLOW),
        _insn(_RET_K, 0, 0, RET_USER_NOTIF),
        _insn(_RET_K, 0, 0, RET_KILL_PROCESS),
    ]
    return b"".join(insns)
