"""Resolving a path beneath the workspace root: ``openat2(RESOLVE_BENEATH)`` where the kernel has
it, else a component walk that refuses symlinks out and magic links."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from typing import Literal

from ..errors import UsageError
from .file_types import NAME_MAX

Resolver = Literal["openat2", "walk"]

_RESOLVE_NO_XDEV = 0x01
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
# openat2 has one number on every architecture built from the generic syscall table.
_SYS_OPENAT2 = {
    "x86_64": 437,
    "aarch64": 437,
    "arm64": 437,
    "i386": 437,
    "i686": 437,
    "armv7l": 437,
    "riscv64": 437,
    "ppc64le": 437,
    "s390x": 437,
    "loongarch64": 437,
}


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


_libc: ctypes.CDLL | None = None


def _openat2(dirfd: int, path: str, flags: int, resolve: int) -> int:
    """``openat2(dirfd, path, {flags, 0, resolve})``; retried on ``EAGAIN`` (a racing rename)."""
    global _libc  # noqa: PLW0603 - loaded once, on first use
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    number = _SYS_OPENAT2.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    how = _OpenHow(flags | os.O_CLOEXEC, 0, resolve)
    encoded = os.fsencode(path)
    for _ in range(16):
        fd = int(
            _libc.syscall(
                ctypes.c_long(number),
                ctypes.c_int(dirfd),
                ctypes.c_char_p(encoded),
                ctypes.byref(how),
                ctypes.c_size_t(ctypes.sizeof(how)),
            )
        )
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code not in (errno.EAGAIN, errno.EINTR):
            raise OSError(code, os.strerror(code), path)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path)


def openat2_available(dirfd: int) -> bool:
    """Whether this kernel (and any seccomp filter) lets ``openat2`` through."""
    try:
        os.close(_openat2(dirfd, ".", os.O_PATH, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS))
    except OSError as error:
        if error.errno in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
            return False
        raise
    return True


def _components(path: str) -> list[str]:
    """``path`` checked and normalized lexically, as its components (``[]`` is the root).

    Raises:
        UsageError: the path is not a string, is empty or absolute, holds a NUL byte or a
            component longer than 255 bytes, or climbs above the root.
    """
    if not isinstance(path, str):
        raise UsageError(
            f"a workspace path is a string, not {type(path).__name__}",
            details={"path": repr(path)},
        )
    if path == "":
        raise UsageError("empty path", hint="name a path relative to the workspace, or '.'")
    if "\x00" in path:
        raise UsageError(
            f"path {path!r} holds a NUL byte", details={"path": path, "rule": "nul_byte"}
        )
    if path.startswith("/"):
        raise UsageError(
            f"path {path!r} is absolute; workspace paths are relative to the workspace",
            hint="drop the leading / and name the path from the workspace root",
            details={"path": path, "rule": "absolute"},
        )
    out: list[str] = []
    for part in path.split("/"):
        if len(os.fsencode(part)) > NAME_MAX:
            raise UsageError(
                f"a component of path {path[:80]!r}... is longer than {NAME_MAX} bytes",
                details={"path": path, "rule": "name_too_long"},
            )
        if part in ("", "."):
            continue
        if part == "..":
            if not out:
                raise UsageError(
                    f"path {path!r} climbs above the workspace",
                    details={"path": path, "rule": "escapes"},
                )
            out.pop()
            continue
        out.append(part)
    return out


def _display(parts: list[str]) -> str:
    return "/".join(parts) or "."


def _refusal(path: str, error: OSError) -> UsageError:
    """An ``OSError`` met while resolving ``path``, as a :class:`UsageError` an agent can read."""
    code = error.errno or 0
    reasons = {
        errno.EXDEV: "leads out of the workspace",
        errno.ELOOP: "goes through a symlink this tool does not follow",
        errno.ENOENT: "does not exist",
        errno.ENOTDIR: "has a component that is not a directory",
        errno.EISDIR: "is a directory",
        errno.EACCES: "is not accessible (permission denied)",
        errno.EPERM: "is not accessible (operation not permitted)",
        errno.ENAMETOOLONG: "is too long",
    }
    reason = reasons.get(code, error.strerror or "cannot be opened")
    return UsageError(
        f"path {path!r} {reason}",
        details={"path": path, "errno": errno.errorcode.get(code, str(code))},
    )


def _link_target(parent: int, name: str, error: OSError, *, follow: bool) -> str:
    """The target of symlink ``name`` that an ``O_NOFOLLOW`` open refused with ``error``.

    Raises:
        OSError: ``error`` itself when ``name`` is no symlink; ``ELOOP`` when links are not
            followed; ``EXDEV`` for an absolute target, which would leave the workspace.
    """
    if error.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EISDIR):
        raise error
    try:
        target = os.readlink(name, dir_fd=parent)
    except OSError:
        raise error from None
    if not follow:
        raise OSError(errno.ELOOP, "is a symlink", name) from None
    if target.startswith("/"):
        raise OSError(errno.EXDEV, "absolute symlink", name) from None
    if target == "":
        raise OSError(errno.ENOENT, "empty symlink", name) from None
    return target
