"""The client's check of its server, before it sends anything: who listens, and where.

A client holds the server's secret and its caller's environment; it hands them only to a
server it has verified (ssh-agent and rootless Docker sockets are trusted the same way):

1. **The folders.** The socket's folder is a real folder (not a symlink) of this user's that
   no one else may write. Every folder above it, up to ``/``, is a real folder owned by this
   user or by root, and either no one else may write it or it is sticky (as ``/tmp`` is: in a
   sticky folder another user cannot rename or remove what is not hers, and what she made is
   hers, which the check of the folder below it refuses). So nobody but the user (and root)
   can have put a socket there or swapped a folder on the way to it.
2. **The listener.** After ``connect()``, ``SO_PEERCRED`` gives the uid of the process that
   listens, as the kernel recorded it at ``listen()``; it must be this user's.

A server that fails either is refused: the client says why in one line and runs in-process.
Standard library only (the thin client imports it).
"""

from __future__ import annotations

import _socket
import os
import stat
import sys

_PEERCRED_SIZE = 12
"""``struct ucred``: pid, uid, gid, three native ints (read without ``struct``, an import the
client does not pay)."""


def folder_problem(folder: str, *, uid: int | None = None) -> str | None:
    """Why the socket in ``folder`` (an absolute path) is not to be trusted, or ``None``.

    Each component is examined with ``lstat`` from ``folder`` up to ``/``: a missing folder
    is no problem (there is no server there yet, and the server makes it 0700 before it
    listens), every other finding is.
    """
    uid = os.getuid() if uid is None else uid
    path = os.path.normpath(folder)
    first = True
    while True:
        try:
            info = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):  # the folder above says what is wrong
            info = None
        except OSError as error:
            return f"cannot examine {path}: {error.strerror}"
        if info is not None:
            why = _problem(path, info, uid, socket_folder=first)
            if why:
                return why
        if path == "/":
            return None
        path = os.path.dirname(path)
        first = False


def _problem(path: str, info: os.stat_result, uid: int, *, socket_folder: bool) -> str | None:
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symlink"
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a folder"
    if info.st_uid != uid and (socket_folder or info.st_uid != 0):
        who = "this user" if socket_folder else "this user or root"
        return f"{path} belongs to uid {info.st_uid}, not {who}"
    writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable and (socket_folder or not info.st_mode & stat.S_ISVTX):
        return f"{path} may be written by others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def listener_uid(conn: _socket.socket) -> int:
    """The uid of the process listening at the other end of ``conn``, by ``SO_PEERCRED``."""
    data = conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, _PEERCRED_SIZE)
    return int.from_bytes(data[4:8], sys.byteorder, signed=True)


def listener_problem(conn: _socket.socket, *, uid: int | None = None) -> str | None:
    """Why the listener at the other end of ``conn`` is not this user's, or ``None``."""
    uid = os.getuid() if uid is None else uid
    try:
        found = listener_uid(conn)
    except OSError as error:
        return f"cannot tell who listens: {error.strerror}"
    return None if found == uid else f"its listener runs as uid {found}, not {uid}"
