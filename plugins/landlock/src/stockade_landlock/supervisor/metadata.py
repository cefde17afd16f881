"""Extended attributes and times: refused on a protected file, made by the supervisor elsewhere.

Neither changes a file's bytes, but both are what another program trusts: a
``security.*`` or ``user.*`` attribute that a tool reads, a modification time that makes
``make`` or git's index take a planted change for an old one. Landlock has no right for
either, so the filter sends every ``setxattr``, ``removexattr`` and time call (their
``l``, ``f`` and ``at`` forms) to the supervisor, which finds the object as the kernel
would (:func:`.calls.attributes`), refuses a protected one (``EROFS``) and makes the change
itself through its own descriptor of that object. The arguments (name, value, times) are
read from the caller's memory once.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
from collections.abc import Callable, Sequence

from .calls import AT_EMPTY_PATH, AT_SYMLINK_NOFOLLOW, Answer, attributes, refuse_privileged
from .resolve import Caller
from .rules import Rules

# x86_64 numbers.
CALLS: dict[str, int] = {
    "setxattr": 188,
    "lsetxattr": 189,
    "fsetxattr": 190,
    "removexattr": 197,
    "lremovexattr": 198,
    "fremovexattr": 199,
    "setxattrat": 463,
    "removexattrat": 466,
    "utime": 132,
    "utimes": 235,
    "futimesat": 261,
    "utimensat": 280,
}
ACCESS_ACL = b"system.posix_acl_access"
XATTR_SIZE_MAX = 65536
XATTR_NAME_MAX = 255
_AT = -100
_ARGS = 16  # struct xattr_args
_PAGE = os.sysconf("SC_PAGE_SIZE")
_libc = ctypes.CDLL(None, use_errno=True)


def answer(caller: Caller, rules: Rules, name: str, a: Sequence[int]) -> Answer:
    """Make the call ``name`` with registers ``a`` for ``caller``, unless it touches a
    protected file."""
    if name.endswith(("xattr", "xattrat")):
        return _xattr(caller, rules, name, a)
    return _times(caller, rules, name, a)


def _xattr(caller: Caller, rules: Rules, name: str, a: Sequence[int]) -> Answer:
    at: tuple[int, bytes]
    if name in ("setxattrat", "removexattrat"):
        flags = a[2] & 0xFFFFFFFF
        at, key_at = (a[0], _path(caller, a[1])), a[3]
    elif name.startswith("f"):
        at, flags, key_at = (a[0], b""), AT_EMPTY_PATH, a[1]
    else:
        nofollow = AT_SYMLINK_NOFOLLOW if name.startswith("l") else 0
        at, flags, key_at = (_AT, caller.read_path(a[0])), nofollow, a[1]
    key = caller.read_path(key_at)
    if not key or len(key) > XATTR_NAME_MAX:
        raise OSError(errno.ERANGE, "bad attribute name")
    if "remove" in name:
        return attributes(caller, rules, at, flags, _on_object(lambda p: os.removexattr(p, key)))
    if name == "setxattrat":
        if a[5] > _PAGE:
            raise OSError(errno.E2BIG, "xattr_args too large")
        args = caller.read_struct(a[4], a[5]) if a[5] >= _ARGS else b""
        if len(args) < _ARGS or any(args[_ARGS:]):
            raise OSError(errno.EINVAL if len(args) < _ARGS else errno.E2BIG, "bad xattr_args")
        pointer, size, how = struct.unpack_from("<QII", args)
    else:
        pointer, size, how = a[2], a[3], a[4] & 0xFFFFFFFF
    if size > XATTR_SIZE_MAX:
        raise OSError(errno.E2BIG, "attribute value too large")
    value = caller.read_struct(pointer, size) if size else b""

    def change(p: str) -> None:
        if key == ACCESS_ACL:  # it sets the mode's group and other bits: execute, say
            refuse_privileged(os.stat(p), p)
        os.setxattr(p, key, value, how)

    return attributes(caller, rules, at, flags, _on_object(change))


def _times(caller: Caller, rules: Rules, name: str, a: Sequence[int]) -> Answer:
    times: bytes | None
    if name == "utimensat":
        flags = a[3] & 0xFFFFFFFF
        path = _path(caller, a[1])
        if not path:
            flags |= AT_EMPTY_PATH  # utimensat(fd, NULL, ...) is futimens(fd)
        at = (a[0], path)
        times = caller.read_struct(a[2], 32) if a[2] else None
    else:
        at = (
            (a[0], caller.read_path(a[1])) if name == "futimesat" else (_AT, caller.read_path(a[0]))
        )
        pointer, flags = (a[2] if name == "futimesat" else a[1]), 0
        times = _timespecs(caller, pointer, seconds_only=name == "utime") if pointer else None
    return attributes(caller, rules, at, flags, lambda p: _utimensat(p, times))


def _path(caller: Caller, address: int) -> bytes:
    """The path at ``address``, or ``b""`` for a null one (the descriptor itself)."""
    return caller.read_path(address) if address else b""


def _timespecs(caller: Caller, address: int, *, seconds_only: bool) -> bytes:
    """``utime``'s ``utimbuf`` or ``utimes``' two ``timeval`` as two ``timespec``."""
    if seconds_only:
        access, modify = struct.unpack("<qq", caller.read_struct(address, 16))
        return struct.pack("<qqqq", access, 0, modify, 0)
    a_s, a_us, m_s, m_us = struct.unpack("<qqqq", caller.read_struct(address, 32))
    if not (0 <= a_us < 1_000_000 and 0 <= m_us < 1_000_000):
        raise OSError(errno.EINVAL, "bad microseconds")
    return struct.pack("<qqqq", a_s, a_us * 1000, m_s, m_us * 1000)


def _utimensat(path: str, times: bytes | None) -> None:
    buffer = ctypes.create_string_buffer(times, 32) if times is not None else None
    if _libc.utimensat(_AT, path.encode(), buffer, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _on_object(change: Callable[[str], None]) -> Callable[[str], None]:
    """``change`` on the object of ``/proc/self/fd/N``; a symlink takes no attribute of a
    user's (``EPERM``, as the kernel answers ``lsetxattr`` on one)."""

    def go(path: str) -> None:
        if stat.S_ISLNK(os.fstat(int(path.rsplit("/", 1)[1])).st_mode):
            raise PermissionError(errno.EPERM, "a symlink")
        change(path)

    return go
