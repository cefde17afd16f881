"""A file's flags (``chattr``): refused on a protected file, set by the supervisor elsewhere.

``FS_IOC_SETFLAGS`` and its neighbours change an inode through a descriptor opened only for
reading, and Landlock judges none of them (its ``IOCTL_DEV`` right covers devices only):
``chattr +i`` or ``+a`` (as root) leaves the person's ``.git/config`` unwritable or
append-only, ``nodump``, ``noatime``, ``projinherit``, a generation number, an encryption
policy or fs-verity (a file made read-only for good) change what their tools see. Bubblewrap's
read-only binds refuse them all (``EROFS``). The filter sends the ``ioctl`` calls of
:data:`IOCTLS` (by their number, a register) and every ``file_setattr`` (Linux 6.17, the
same by path) here: the supervisor takes the caller's descriptor (``pidfd_getfd``: the same
open file) or finds the path's object as for ``chmod`` (:func:`.calls.attributes`), refuses
a protected one by its own path, and makes the call itself with the argument read once from
the caller's memory.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
from collections.abc import Sequence

from .calls import AT_EMPTY_PATH, AT_SYMLINK_NOFOLLOW, Answer, attributes, refuse_if
from .resolve import Caller, where
from .rules import Rules

FS_IOC_SET_ENCRYPTION_POLICY = 0x800C6613
FS_IOC_ENABLE_VERITY = 0x40806685
# The ioctl numbers (low 32 bits: the kernel reads an unsigned int) and the bytes each reads
# (their 32-bit twins, FS_IOC32_*, exist only for 32-bit callers: the filter kills those).
IOCTLS: dict[int, int] = {
    0x40086602: 4,  # FS_IOC_SETFLAGS (reads an int whatever its name says)
    0x40087602: 4,  # FS_IOC_SETVERSION
    0x40086604: 4,  # EXT4_IOC_SETVERSION (ext4's own number for the same change)
    0x401C5820: 28,  # FS_IOC_FSSETXATTR (struct fsxattr)
    0x4008941A: 8,  # BTRFS_IOC_SUBVOL_SETFLAGS (read-only subvolume)
    FS_IOC_SET_ENCRYPTION_POLICY: 0,  # its size is its version's
    FS_IOC_ENABLE_VERITY: 128,  # struct fsverity_enable_arg, with two pointers in it
}
FILE_SETATTR = 469
FILE_ATTR_SIZE = 24  # struct file_attr, version 0
_POLICY = {0: 12, 2: 24}  # fscrypt policy version -> struct size
_SALT_MAX, _SIGNATURE_MAX = 32, 16128
_PAGE = os.sysconf("SC_PAGE_SIZE")
_libc = ctypes.CDLL(None, use_errno=True)


def ioctl(caller: Caller, rules: Rules, a: Sequence[int]) -> Answer:
    """``ioctl(fd, cmd, arg)`` with ``cmd`` in :data:`IOCTLS`, for ``caller``."""
    cmd = a[1] & 0xFFFFFFFF
    found = caller.take(a[0])
    info = os.fstat(found)
    if stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode):
        refuse_if(rules, where(found).removesuffix(" (deleted)"))
    keep: list[ctypes.Array[ctypes.c_char]] = []
    argument = _argument(caller, cmd, a[2], keep)
    got = _libc.ioctl(found, ctypes.c_ulong(cmd), argument)
    if got < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return Answer(got)


def _argument(
    caller: Caller, cmd: int, address: int, keep: list[ctypes.Array[ctypes.c_char]]
) -> ctypes.Array[ctypes.c_char]:
    """The argument of ``cmd`` copied from ``address`` into the supervisor's memory."""
    size = IOCTLS[cmd]
    if cmd == FS_IOC_SET_ENCRYPTION_POLICY:
        version = caller.read_struct(address, 1)[0]
        size = _POLICY.get(version, 0)
        if not size:
            raise OSError(errno.EINVAL, "unknown encryption policy version")
    data = bytearray(caller.read_struct(address, size))
    if cmd == FS_IOC_ENABLE_VERITY:  # the salt and the signature, copied and pointed at
        salt_size, salt_at, sig_size, sig_at = struct.unpack_from("<12xIQI4xQ", data)
        if salt_size > _SALT_MAX or sig_size > _SIGNATURE_MAX:
            raise OSError(errno.EMSGSIZE, "salt or signature too large")
        for offset, at, length in ((16, salt_at, salt_size), (32, sig_at, sig_size)):
            if length:
                copy = ctypes.create_string_buffer(caller.read_struct(at, length), length)
                keep.append(copy)
                struct.pack_into("<Q", data, offset, ctypes.addressof(copy))
    return ctypes.create_string_buffer(bytes(data), max(size, 1))


def file_setattr(caller: Caller, rules: Rules, a: Sequence[int]) -> Answer:
    """``file_setattr(dirfd, path, attr, size, flags)`` for ``caller``."""
    flags, size = a[4] & 0xFFFFFFFF, a[3]
    if flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH):
        raise OSError(errno.EINVAL, "bad flags")
    if size < FILE_ATTR_SIZE:
        raise OSError(errno.EINVAL, "struct file_attr too small")
    if size > _PAGE:
        raise OSError(errno.E2BIG, "struct file_attr too large")
    raw = caller.read_struct(a[2], size)
    if any(raw[FILE_ATTR_SIZE:]):
        raise OSError(errno.E2BIG, "unknown struct file_attr fields")
    path = caller.read_path(a[1]) if a[1] else b""
    buffer = ctypes.create_string_buffer(raw[:FILE_ATTR_SIZE], FILE_ATTR_SIZE)

    def change(target: str) -> None:
        size_t = ctypes.c_size_t(FILE_ATTR_SIZE)
        if _libc.syscall(FILE_SETATTR, -100, target.encode(), buffer, size_t, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    return attributes(caller, rules, (a[0], path), flags, change)
