"""``bind``: a Unix socket's name is a new name like any other, judged before it is made.

Landlock's ``MAKE_SOCK`` right comes with the writable roots (a command's own servers work),
and ``bind`` of a pathname ``AF_UNIX`` socket makes a name there: a socket from
``socketpair`` too, which every command may make, ``unix_sockets`` or not. On a protected
name that would be one more way to plant what bubblewrap's read-only binds refuse. A filter
cannot read the address (it is in memory), so it sends every ``bind`` here: the supervisor
reads the address once, takes the caller's socket (``pidfd_getfd``: the same open file),
finds a pathname's folder as for any new name, refuses a protected name (``EROFS``) and
binds the socket itself, in that folder, by its last name alone. Any other address (an
abstract or unnamed Unix socket, TCP, UDP) is bound as given: the supervisor's ``bind`` is
judged by Landlock as the caller's would be (same domain, its TCP ports).
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Sequence

from .calls import Answer, refuse_new
from .resolve import AT_FDCWD, Caller, signed
from .rules import Rules

AF_UNIX = 1
SUN_PATH = 108
_STORAGE = 128  # sizeof(struct sockaddr_storage): the kernel refuses a longer address
_libc = ctypes.CDLL(None, use_errno=True)


def bind(caller: Caller, rules: Rules, a: Sequence[int]) -> Answer:
    """``bind(fd, addr, addrlen)`` for ``caller``, unless it names a protected path."""
    length = signed(a[2])
    if length < 0 or length > _STORAGE:
        raise OSError(errno.EINVAL, "bad address length")
    raw = caller.read_struct(a[1], length) if length else b""
    sock = caller.take(a[0])
    family = int.from_bytes(raw[:2], "little") if length >= 2 else None
    if family != AF_UNIX or length <= 2 or raw[2] == 0:  # abstract, unnamed, or not Unix
        _bind(sock, raw)
        return Answer()
    path = raw[2:].split(b"\0", 1)[0]
    folder, last, target = caller.parent(*caller.start(AT_FDCWD, path))
    refuse_new(rules, target, "node", (folder, last))
    umask = caller.umask()
    if caller.exact:  # this thread's own working directory and umask (unshare(CLONE_FS))
        os.fchdir(folder)
        os.umask(umask)
        try:
            _bind(sock, _unix(last))
        finally:
            os.umask(0)
        return Answer()
    through = b"/proc/self/fd/%d/%s" % (folder, last)
    if len(through) >= SUN_PATH:
        raise OSError(errno.ENAMETOOLONG, "a socket's name too long to bind from here")
    _bind(sock, _unix(through))
    caller.settle(None, 0o777 & ~umask, last, folder)
    return Answer()


def _unix(path: bytes) -> bytes:
    return AF_UNIX.to_bytes(2, "little") + path + b"\0"


def _bind(sock: int, address: bytes) -> None:
    buffer = ctypes.create_string_buffer(address, max(len(address), 1))
    if _libc.bind(sock, buffer, ctypes.c_uint(len(address))) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
