"""Writing one file beneath a held directory descriptor: what it replaces, and the atomic
replacement itself (a temp file, ``fsync``, ``rename``, ``fsync`` of the directory)."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat

from ..errors import StockadeError, UsageError
from .file_types import _DIR_FLAGS, _READ_FLAGS
from .openat2 import _refusal
from .sniff import _sha256_fd


def old(parent: int, name: str, shown: str) -> tuple[str | None, int | None, int | None]:
    """The sha256, size and mode of the file being replaced, or ``None`` when it is new."""
    try:
        fd = os.open(name, _READ_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
    except FileNotFoundError:
        return None, None, None
    except OSError as error:
        raise _refusal(shown, error) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise UsageError(f"path {shown!r} is a directory; file_write writes files")
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"path {shown!r} is not a regular file")
        digest, size = _sha256_fd(fd)
        return digest, size, stat.S_IMODE(info.st_mode)
    finally:
        os.close(fd)


def replace(parent: int, name: str, data: bytes, mode: int | None, shown: str) -> None:
    """Write ``data`` to a temp file beside ``name``, flush it, and rename it over."""
    temp = f".stockade-tmp-{secrets.token_hex(8)}"
    try:
        fd = os.open(
            temp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644 if mode is None else 0o600,
            dir_fd=parent,
        )
    except OSError as error:
        raise failed(shown, error) from None
    try:
        try:
            if mode is not None:
                # The old file's permissions, owner-readable, never set-id.
                os.fchmod(fd, (mode & 0o777) | stat.S_IRUSR)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=parent)
        if isinstance(error, OSError):
            if error.errno in (errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY):
                raise _refusal(shown, error) from None
            raise failed(shown, error) from None
        raise
    with contextlib.suppress(OSError):  # the rename is done; make it durable if we can
        dirfd = os.open(".", _DIR_FLAGS, dir_fd=parent)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)


def where(root: int, parent: int, name: str) -> str | None:
    """Where ``name`` in folder ``parent`` is now, relative to the workspace ``root`` (both
    descriptors), as the kernel names the held folders (``/proc/self/fd``); ``None`` when
    the folder is no longer beneath the root (moved out, removed) or cannot be named."""
    try:
        base = os.readlink(f"/proc/self/fd/{root}")
        folder = os.readlink(f"/proc/self/fd/{parent}")
    except OSError:
        return None
    if folder == base:
        return name
    if folder.endswith(" (deleted)") or not folder.startswith(base.rstrip("/") + "/"):
        return None
    return folder[len(base.rstrip("/")) + 1 :] + "/" + name


def failed(path: str, error: OSError) -> StockadeError:
    code = error.errno or 0
    return StockadeError(
        f"could not write {path!r}: {error.strerror or error}; the old file is unchanged",
        hint="free some space or fix the directory's permissions, then write again",
        details={"path": path, "errno": errno.errorcode.get(code, str(code))},
    )
