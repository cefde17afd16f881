"""Where one user's server lives: its socket, the secret a client presents, its log.

One server serves one state directory (one store) for one user and one installation,
named by a digest of the uid, the state directory, home, the interpreter's prefix, where
this code lives and the runtime folder (so two state directories, two checkouts or two
venvs never share a server). Its socket sits in a 0700 folder named by the digest under
``$XDG_RUNTIME_DIR/stockade/``, else it is ``<state>/server/<digest[:8]>``. The secret,
the pid file and the log are always in ``<state>/server/`` (0700), named with the same
digest: the state directory is hidden from every sandboxed command, so no command can read
the secret.

Standard library only (the thin client imports it).
"""

from __future__ import annotations

import os
import stat
import sys

from ..config.dirs import state_dir

TYPE_CHECKING = False  # not typing's: the thin client imports this module
if TYPE_CHECKING:
    from collections.abc import Mapping

SOCKET = "socket"
TOKEN = "token"  # noqa: S105 - the name of the file that holds the secret
PID = "pid"
LOG = "log"
START_LOCK = "start"
_MAX_SUN_PATH = 100  # sockaddr_un holds 108 bytes; longer paths go through /proc/self/fd


class Place:
    """The files of one user's server for one environment."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        state = os.path.realpath(state_dir(environ))
        self.private = os.path.join(state, "server")
        runtime = environ.get("XDG_RUNTIME_DIR")
        # One server per user, state, home and installation (the interpreter's prefix and
        # where this code lives): two checkouts or venvs never share one.
        # A client without XDG_RUNTIME_DIR on the same state has a server of its own too:
        # the two must not share (and overwrite) one secret and pid file.
        if not (runtime and os.path.isabs(runtime) and _owned_dir(runtime)):
            runtime = None
        self.state = state  # the keys of the native client's card (stockade.server.card)
        self.runtime = runtime
        code = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
        key = "\0".join(
            (str(os.getuid()), state, environ.get("HOME", ""), sys.prefix, code, runtime or "")
        )
        digest = _sha256(key.encode("utf-8", "surrogateescape"))[:16]
        suffix = f"-{digest}"
        if runtime is None:  # named by the digest alone: the path stays short for sockaddr_un
            self.folder = self.private
            self.socket = os.path.join(self.folder, digest[:8])
        else:
            self.folder = os.path.join(runtime, "stockade", digest)
            self.socket = os.path.join(self.folder, SOCKET)
        self.token = os.path.join(self.private, TOKEN + suffix)
        self.pid = os.path.join(self.private, PID + suffix)
        self.log = os.path.join(self.private, LOG + suffix)
        self.start_lock = os.path.join(self.private, START_LOCK + suffix)

    def make(self) -> None:
        """Create both folders, 0700, refusing one that another user owns or others may open.

        Raises:
            PermissionError: a folder is not this user's alone.
        """
        for folder in dict.fromkeys((os.path.dirname(self.folder), self.folder, self.private)):
            os.makedirs(folder, mode=0o700, exist_ok=True)
            info = os.lstat(folder)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                raise PermissionError(f"{folder} is not a folder of this user's")
            if stat.S_IMODE(info.st_mode) & 0o077:
                os.chmod(folder, 0o700)

    def address(self) -> tuple[str, int | None]:
        """The path to bind or connect to, and a folder descriptor the caller closes after
        (for a socket path too long for ``sockaddr_un``)."""
        if len(self.socket.encode()) <= _MAX_SUN_PATH:
            return self.socket, None
        fd = os.open(self.folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        return f"/proc/self/fd/{fd}/{os.path.basename(self.socket)}", fd


def _sha256(data: bytes) -> str:
    if TYPE_CHECKING:
        from hashlib import sha256
    else:
        try:  # the builtin module: hashlib loads OpenSSL, ~4 ms of the thin client's start
            from _sha256 import sha256
        except ImportError:  # pragma: no cover - CPython has it
            from hashlib import sha256
    digest: str = sha256(data).hexdigest()
    return digest


def _owned_dir(path: str) -> bool:
    try:
        info = os.stat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
