"""A small binding of the Landlock system calls, written by hand.

The ``landlock`` package on PyPI covers file-system rules only; Stockade also needs the
network rules (ABI 4), the scopes for abstract Unix sockets and signals (ABI 6), and the
per-ABI sets of handled rights, so the three system calls are called here through ctypes.
Nothing is applied to the calling process except by :func:`restrict_self`, which
restricts the calling *thread* only (and, with it, every process it starts afterwards).

The numbers and layouts follow ``include/uapi/linux/landlock.h``; the system call numbers
are the same on every architecture that has them (444, 445, 446).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import threading
from typing import Any

SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
RULE_NET_PORT = 2
PR_SET_NO_NEW_PRIVS = 38

# File-system rights, with the ABI version that brought each.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2: link or rename across directories
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5: ioctl on character and block devices

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

FS_READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
# The rights that apply to a file (a rule on a file may hold only these).
FS_FILE = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

_FS_BY_ABI = {
    1: (1 << 13) - 1,
    2: (1 << 14) - 1,
    3: (1 << 15) - 1,
    4: (1 << 15) - 1,
    5: (1 << 16) - 1,
}


def fs_rights(abi: int) -> int:
    """Every file-system right the kernel's ABI knows."""
    return _FS_BY_ABI[min(max(abi, 1), 5)]


def net_rights(abi: int) -> int:
    """Every network right the ABI knows (none before 4)."""
    return NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0


def scopes(abi: int) -> int:
    """Every scope the ABI knows (none before 6)."""
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneath(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class _NetPort(ctypes.Structure):
    _fields_ = (("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64))


# The size the kernel reads of the attribute struct: each ABI added a field.
_ATTR_SIZE = {1: 8, 2: 8, 3: 8, 4: 16, 5: 16}
_lock = threading.Lock()
_libc: ctypes.CDLL | None = None


def libc() -> ctypes.CDLL:
    """The C library, loaded once (``dlopen`` is not free, and spawns are frequent)."""
    global _libc  # noqa: PLW0603 - loaded once
    if _libc is None:
        with _lock:
            if _libc is None:
                _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _syscall() -> Any:  # noqa: ANN401 - a ctypes foreign function
    return libc().syscall


class LandlockError(OSError):
    """A Landlock system call failed."""


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"{what}: {os.strerror(err)}")
    return result


def version() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or disabled."""
    abi = _syscall()(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), CREATE_RULESET_VERSION)
    return max(int(abi), 0)


def create_ruleset(abi: int, *, fs: int, net: int = 0, scoped: int = 0) -> int:
    """A new ruleset handling ``fs``, ``net`` and ``scoped`` rights; its descriptor."""
    attr = _RulesetAttr(fs, net, scoped)
    size = _ATTR_SIZE.get(abi, ctypes.sizeof(_RulesetAttr))
    fd = _syscall()(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    return _check(fd, "landlock_create_ruleset")


def add_path_rule(ruleset: int, path: str, access: int, *, exact: bool = False) -> None:
    """Allow ``access`` beneath ``path`` (opened ``O_PATH``, not followed if a symlink).

    With ``exact``, ``path`` must be resolved and still hold what was there: if it, or a
    folder on the way, has since been swapped for a symlink (or removed), the opened object
    is elsewhere or a link, and ``FileNotFoundError`` is raised instead of granting
    ``access``. The check reads the descriptor's own path, which cannot change under it.
    """
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        if exact and (_where(fd) != path or stat.S_ISLNK(os.fstat(fd).st_mode)):
            raise FileNotFoundError(errno.ENOENT, "moved while the ruleset was built", path)
        rule = _PathBeneath(access, fd)
        _check(
            _syscall()(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), 0),
            f"landlock_add_rule({path})",
        )
    finally:
        os.close(fd)


def _where(fd: int) -> str:
    """The path ``fd`` was opened at, as the kernel keeps it (``/proc`` must be mounted)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError as error:  # not "vanished": nothing can be checked without /proc
        raise LandlockError(error.errno or errno.EIO, "cannot read /proc/self/fd") from error


def add_port_rule(ruleset: int, port: int, access: int) -> None:
    """Allow ``access`` (bind, connect) on TCP ``port``."""
    rule = _NetPort(access, port)
    _check(
        _syscall()(SYS_ADD_RULE, ruleset, RULE_NET_PORT, ctypes.byref(rule), 0),
        f"landlock_add_rule(port {port})",
    )


def restrict_self(ruleset: int) -> None:
    """Set ``no_new_privs`` and enforce ``ruleset`` on the calling thread, for good."""
    _check(libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(_syscall()(SYS_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")


FS_ALL = fs_rights(5)
"""Every file-system right this binding knows (ABI 5 and later)."""


_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_SYS_CAPSET = 126  # x86_64
_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def drop_capabilities() -> None:
    """Drop every capability of the calling thread: bounding, ambient, then the sets.

    Capabilities are per thread, so the host's other threads keep theirs. Without
    ``CAP_SETPCAP`` (an ordinary user) the bounding set cannot change, and there is
    nothing in it to fear: the permitted set is already empty.
    """
    prctl = libc().prctl
    if os.geteuid() == 0:  # only root holds CAP_SETPCAP to empty the bounding set with
        for cap in range(_last_cap() + 1):
            prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(
        _syscall()(_SYS_CAPSET, ctypes.byref(header), ctypes.byref(data)), "capset(no capabilities)"
    )


_last: int | None = None


def _last_cap() -> int:
    global _last  # noqa: PLW0603 - a kernel constant, read once
    if _last is None:
        try:
            with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as f:
                _last = int(f.read())
        except (OSError, ValueError):
            _last = 63
    return _last
