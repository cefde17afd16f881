"""The system calls the supervisor needs, bound by hand with ctypes (x86_64 numbers).

Seccomp's user notification (``SECCOMP_FILTER_FLAG_NEW_LISTENER``, the ``NOTIF_*`` ioctls,
``SECCOMP_IOCTL_NOTIF_ADDFD`` with ``SECCOMP_ADDFD_FLAG_SEND``: Linux 5.14), ``openat2``
(5.6), ``process_vm_readv``, and ``unshare(CLONE_FS)`` for a thread of its own umask. Every
call through ctypes releases the GIL, so a thread blocked here never holds up the host's
others. The layouts follow ``include/uapi/linux/seccomp.h`` and ``openat2.h``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Callable
from typing import Any

SYS_SECCOMP = 317
SYS_OPENAT2 = 437
SYS_PROCESS_VM_READV = 310
SYS_PIDFD_OPEN = 434
SYS_PIDFD_GETFD = 438
PIDFD_THREAD = os.O_EXCL  # Linux 6.9: a pidfd of one thread (its own descriptor table)
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_GET_NOTIF_SIZES = 3
SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
SECCOMP_ADDFD_FLAG_SEND = 1 << 1
SECCOMP_USER_NOTIF_FLAG_CONTINUE = 1
CLONE_FS = 0x200

RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_IN_ROOT = 0x10
RESOLVE_CACHED = 0x20
RESOLVE_ALL = 0x3F


def _ioc(direction: int, nr: int, size: int) -> int:
    return direction << 30 | size << 16 | ord("!") << 8 | nr


class SeccompData(ctypes.Structure):
    """``struct seccomp_data``: the call as the filter saw it."""

    _fields_ = (
        ("nr", ctypes.c_int32),
        ("arch", ctypes.c_uint32),
        ("ip", ctypes.c_uint64),
        ("args", ctypes.c_uint64 * 6),
    )


class Notif(ctypes.Structure):
    """``struct seccomp_notif``: one call waiting for an answer."""

    _fields_ = (
        ("id", ctypes.c_uint64),
        ("pid", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("data", SeccompData),
    )


class Resp(ctypes.Structure):
    """``struct seccomp_notif_resp``: the answer (a value, or ``-errno`` in ``error``)."""

    _fields_ = (
        ("id", ctypes.c_uint64),
        ("val", ctypes.c_int64),
        ("error", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
    )


class AddFd(ctypes.Structure):
    """``struct seccomp_notif_addfd``: a descriptor to put into the caller, and answer with."""

    _fields_ = (
        ("id", ctypes.c_uint64),
        ("flags", ctypes.c_uint32),
        ("srcfd", ctypes.c_uint32),
        ("newfd", ctypes.c_uint32),
        ("newfd_flags", ctypes.c_uint32),
    )


class OpenHow(ctypes.Structure):
    """``struct open_how`` (``openat2``)."""

    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


class _Statfs(ctypes.Structure):
    _fields_ = (("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 112))


_OPEN_HOW = ctypes.c_size_t(ctypes.sizeof(OpenHow))


class _Sizes(ctypes.Structure):
    _fields_ = (("notif", ctypes.c_uint16), ("resp", ctypes.c_uint16), ("data", ctypes.c_uint16))


class _Fprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


class _Iovec(ctypes.Structure):
    _fields_ = (("base", ctypes.c_void_p), ("len", ctypes.c_size_t))


NOTIF_RECV = _ioc(3, 0, ctypes.sizeof(Notif))
NOTIF_SEND = _ioc(3, 1, ctypes.sizeof(Resp))
NOTIF_ID_VALID = _ioc(1, 2, 8)
NOTIF_ADDFD = _ioc(1, 3, ctypes.sizeof(AddFd))
NOTIF_SET_FLAGS = _ioc(1, 4, 8)
SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP = 1
_RECV, _SEND, _VALID, _ADDFD = (
    ctypes.c_ulong(n) for n in (NOTIF_RECV, NOTIF_SEND, NOTIF_ID_VALID, NOTIF_ADDFD)
)

_libc = ctypes.CDLL(None, use_errno=True)
_syscall: Any = _libc.syscall
_ioctl: Any = _libc.ioctl


def _fail(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def sizes_match() -> bool:
    """Whether this kernel's notification structures are the ones laid out here."""
    sizes = _Sizes()
    if _syscall(SYS_SECCOMP, SECCOMP_GET_NOTIF_SIZES, 0, ctypes.byref(sizes)) != 0:
        return False
    return (sizes.notif, sizes.resp, sizes.data) == (
        ctypes.sizeof(Notif),
        ctypes.sizeof(Resp),
        ctypes.sizeof(SeccompData),
    )


def install_listener(program: bytes) -> int:
    """Install ``program`` on the calling thread (``no_new_privs`` set); its listener."""
    buffer = ctypes.create_string_buffer(program, len(program))
    prog = _Fprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    flags = SECCOMP_FILTER_FLAG_NEW_LISTENER
    fd = _syscall(SYS_SECCOMP, SECCOMP_SET_MODE_FILTER, flags, ctypes.byref(prog))
    if fd < 0:
        raise _fail("seccomp(NEW_LISTENER)")
    return int(fd)


def sync_wake_up(listener: int) -> bool:
    """Ask the kernel to switch to the waiting side at once, on the same CPU, at each
    notification and answer (``SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP``, Linux 6.6): a round
    trip then costs no wait for a scheduler's tick. ``False`` where the kernel lacks it."""
    flags = ctypes.c_ulong(SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)  # the value, not a pointer
    return bool(_ioctl(listener, ctypes.c_ulong(NOTIF_SET_FLAGS), flags) == 0)


class Inbox:
    """One notification buffer, read into again and again: :attr:`data` and :attr:`args`
    are views of it, made once (no object made per call on the supervisor's hot path)."""

    def __init__(self) -> None:
        self.notif = Notif()
        self.data = self.notif.data
        self.args = self.data.args
        self._ref = ctypes.byref(self.notif)
        self._size = ctypes.sizeof(self.notif)

    def recv(self, listener: int) -> None:
        """Wait for the next call (``ENOENT``: its caller was killed before we read it)."""
        ctypes.memset(self._ref, 0, self._size)  # the kernel wants it zeroed
        if _ioctl(listener, _RECV, self._ref) != 0:
            raise _fail("NOTIF_RECV")


class _Scratch(threading.local):
    """The answer's structures, one set per thread (the supervisor's and a FIFO waiter's),
    filled in for each call instead of made."""

    def __init__(self) -> None:
        self.resp = Resp()
        self.resp_ref = ctypes.byref(self.resp)
        self.add = AddFd()
        self.add_ref = ctypes.byref(self.add)
        self.ident = ctypes.c_uint64()
        self.ident_ref = ctypes.byref(self.ident)
        self.how = OpenHow()
        self.how_ref = ctypes.byref(self.how)
        self.statfs = _Statfs()
        self.statfs_ref = ctypes.byref(self.statfs)


_scratch = _Scratch()


def send(
    listener: int, ident: int, value: int = 0, error: int = 0, *, proceed: bool = False
) -> None:
    """Answer call ``ident``: ``value``, or fail it with ``error`` (a positive errno), or
    let the kernel make it (``proceed``: ``SECCOMP_USER_NOTIF_FLAG_CONTINUE``)."""
    scratch = _scratch
    resp = scratch.resp
    resp.id, resp.val, resp.error = ident, value, -error
    resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE if proceed else 0
    if _ioctl(listener, _SEND, scratch.resp_ref) != 0:
        raise _fail("NOTIF_SEND")


def valid(listener: int, ident: int) -> bool:
    """Whether call ``ident`` still waits (its caller, and so its pid, is still the same)."""
    scratch = _scratch
    scratch.ident.value = ident
    return bool(_ioctl(listener, _VALID, scratch.ident_ref) == 0)


def send_fd(listener: int, ident: int, fd: int, *, cloexec: bool) -> None:
    """Put ``fd`` into the caller and answer call ``ident`` with its number, at once."""
    scratch = _scratch
    add = scratch.add
    add.id, add.flags, add.srcfd = ident, SECCOMP_ADDFD_FLAG_SEND, fd
    add.newfd, add.newfd_flags = 0, os.O_CLOEXEC if cloexec else 0
    if _ioctl(listener, _ADDFD, scratch.add_ref) < 0:
        raise _fail("NOTIF_ADDFD")


def pidfd_thread(tid: int) -> int:
    """A pidfd of thread ``tid`` itself (``PIDFD_THREAD``, Linux 6.9)."""
    pidfd = _syscall(SYS_PIDFD_OPEN, tid, PIDFD_THREAD)
    if pidfd < 0:
        raise _fail("pidfd_open")
    return int(pidfd)


def take_fd(tid: int, fd: int, tgid: Callable[[], int], still: Callable[[], None]) -> int:
    """A copy of descriptor ``fd`` of thread ``tid`` (``pidfd_getfd``: the same open file,
    close-on-exec here); before Linux 6.9, of its process ``tgid()``. ``still()`` raises
    unless the caller still waits once its pidfd is held (its number was not reused)."""
    pidfd = _syscall(SYS_PIDFD_OPEN, tid, PIDFD_THREAD)
    if pidfd < 0 and ctypes.get_errno() == errno.EINVAL:
        pidfd = _syscall(SYS_PIDFD_OPEN, tgid(), 0)
    if pidfd < 0:
        raise _fail("pidfd_open")
    try:
        still()
        got = _syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
        if got < 0:
            raise _fail("pidfd_getfd")
        return int(got)
    finally:
        os.close(pidfd)


class _Reader(threading.local):
    """One buffer per thread for :func:`read_memory` (no allocation per read)."""

    def __init__(self) -> None:
        self.size = _READ
        self.buffer = ctypes.create_string_buffer(_READ)
        self.local = _Iovec(ctypes.cast(self.buffer, ctypes.c_void_p), _READ)
        self.remote = _Iovec(None, _READ)
        self.local_ref, self.remote_ref = ctypes.byref(self.local), ctypes.byref(self.remote)


_READ = 4096
_reader = _Reader()
_ONE, _NO_FLAGS = ctypes.c_ulong(1), ctypes.c_ulong(0)


def read_memory(pid: int, address: int, size: int) -> bytes:
    """Up to ``size`` bytes of process ``pid``'s memory at ``address`` (fewer at a hole)."""
    if size > _READ:
        return b"".join(
            read_memory(pid, address + at, min(_READ, size - at)) for at in range(0, size, _READ)
        )
    reader = _reader
    reader.local.len = reader.remote.len = size
    reader.remote.base = address
    got = _syscall(
        SYS_PROCESS_VM_READV, pid, reader.local_ref, _ONE, reader.remote_ref, _ONE, _NO_FLAGS
    )
    if got < 0:
        error = _fail("process_vm_readv")
        if error.errno not in (errno.EPERM, errno.ENOSYS):
            raise error
        return _read_proc_mem(pid, address, size)  # the call refused (a container's filter)
    return ctypes.string_at(reader.buffer, got)


class Peek:
    """The first ``size`` bytes of a path in another process, into one buffer made once
    (the supervisor's hot path: no allocation per call)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._buffer = ctypes.create_string_buffer(size)
        self._local = _Iovec(ctypes.cast(self._buffer, ctypes.c_void_p), size)
        self._remote = _Iovec(None, size)
        self._local_ref, self._remote_ref = ctypes.byref(self._local), ctypes.byref(self._remote)

    def read(self, pid: int, address: int) -> bytes | None:
        """The path at ``address`` up to its NUL, or its first ``size`` bytes; ``b""``
        when the memory cannot be read at all (a non-dumpable process, a bad address);
        ``None`` when fewer bytes could be read and no NUL was among them (a page's end:
        the caller reads the path in full)."""
        self._remote.base = address
        got = _syscall(
            SYS_PROCESS_VM_READV, pid, self._local_ref, _ONE, self._remote_ref, _ONE, _NO_FLAGS
        )
        if got <= 0:
            return b""
        head = self._buffer.raw[:got]
        end = head.find(b"\0")
        if end >= 0:
            return head[:end]
        return head if got == self.size else None


def _read_proc_mem(pid: int, address: int, size: int) -> bytes:
    """Up to ``size`` bytes at ``address`` through ``/proc/PID/mem`` (fewer at a hole)."""
    fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.pread(fd, size, address)
    except OSError as error:
        if error.errno == errno.EIO:  # an unmapped page
            return b""
        raise
    finally:
        os.close(fd)


def openat2(dirfd: int, path: bytes, flags: int, mode: int = 0, resolve: int = 0) -> int:
    """``openat2(2)``; raises ``OSError`` with the kernel's errno."""
    scratch = _scratch
    how = scratch.how
    how.flags, how.mode, how.resolve = flags, mode, resolve
    fd = _syscall(SYS_OPENAT2, dirfd, path, scratch.how_ref, _OPEN_HOW)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(fd)


def fs_type(fd: int) -> int | None:
    """The magic number of the file system ``fd`` lies on (``fstatfs``), or ``None``."""
    scratch = _scratch
    if _libc.fstatfs(fd, scratch.statfs_ref) != 0:
        return None
    return int(scratch.statfs.f_type)


def own_fs() -> None:
    """Give the calling thread a cwd, root and umask of its own (``unshare(CLONE_FS)``)."""
    if _libc.unshare(CLONE_FS) != 0:
        raise _fail("unshare(CLONE_FS)")
