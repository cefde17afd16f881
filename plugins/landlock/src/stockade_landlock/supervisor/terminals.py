"""Pseudo-terminals: the command's own are allowed, a person's are not.

``openpty()`` opens ``/dev/ptmx`` (a new terminal) and then its other end, ``/dev/pts/N``:
through ``TIOCGPTPEER``, and when that is refused by opening the path. Granting
``/dev/pts`` to the command would also let it open a person's terminal, for reading too
(a read-only open never reaches the supervisor). So the supervisor sits one Landlock layer
above the command: its own domain grants ``/dev/ptmx`` and ``/dev/pts`` (:data:`DEVICES`);
the command's adds one more layer, the :class:`Veil`, that grants file access everywhere
but there. The command's ``/dev/ptmx`` and ``/dev/pts/N`` opens (for writing: the filter
sends them) are made by the supervisor, which keeps the numbers of the terminals it made
(:class:`Terminals`) and refuses every other ``/dev/pts/N`` (``EACCES``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import struct
import threading

from .. import abi
from ..rules import Rule, expand

_RW_IOCTL = abi.FS_READ_FILE | abi.FS_WRITE_FILE | abi.FS_IOCTL_DEV
DEVICES = {"/dev/ptmx": _RW_IOCTL, "/dev/pts": _RW_IOCTL}
"""What the supervisor's domain grants beyond the command's rules (the Veil takes it back)."""
PROC = "/proc"
"""Opened by the supervisor only (:mod:`.processes`): the Veil takes file access there away."""
TIOCGPTN = 0x80045430
_PTS = re.compile(r"^/dev/pts/(\d+)$")


class Terminals:
    """The pseudo-terminals the supervisor made for one run, by number."""

    def __init__(self) -> None:
        self._owned: set[int] = set()
        self._lock = threading.Lock()

    def made(self, fd: int, path: str) -> None:
        """Keep the number of the terminal ``fd`` is the master of (``/dev/ptmx``)."""
        if path in ("/dev/ptmx", "/dev/pts/ptmx"):
            with contextlib.suppress(OSError):
                number = struct.unpack("I", fcntl.ioctl(fd, TIOCGPTN, b"\0" * 4))[0]
                with self._lock:
                    self._owned.add(number)

    def check(self, path: str) -> None:
        """Refuse (``EACCES``) ``/dev/pts/N`` unless this run made terminal ``N``."""
        found = _PTS.match(path)
        if found is not None:
            with self._lock:
                if int(found.group(1)) not in self._owned:
                    raise PermissionError(errno.EACCES, "not a terminal of this run", path)


class Veil:
    """The command's extra Landlock layer: file access everywhere but the terminals and
    ``/proc`` (the supervisor opens what the command may there, :mod:`.processes`).

    Its rules (every entry of ``/`` but ``/proc``, of ``/dev`` but ``ptmx`` and ``pts``) are listed
    once and made again when ``/`` or ``/dev`` changes; each plan holds a duplicate of
    the ruleset's descriptor.
    """

    def __init__(self) -> None:
        self._fd: int | None = None
        self._stamps: tuple[tuple[str, int], ...] = ()
        self._lock = threading.Lock()

    def ruleset(self, level: int) -> int:
        """A descriptor of the veil's ruleset for ABI ``level`` (the caller closes it)."""
        with self._lock:
            if self._fd is None or not self._fresh():
                self.close_locked()
                handled = _RW_IOCTL & abi.fs_rights(level)
                listed: list[str] = []
                taken = [(p, handled) for p in (*DEVICES, PROC)]
                rules = expand([("/", handled)], taken, listed)
                self._fd = _build(level, handled, rules)
                self._stamps = tuple((d, os.stat(d).st_mtime_ns) for d in listed)
            return os.dup(self._fd)

    def _fresh(self) -> bool:
        try:
            return all(os.stat(d).st_mtime_ns == m for d, m in self._stamps)
        except OSError:
            return False

    def close_locked(self) -> None:
        """Close the cached ruleset (the lock held)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        """Close the cached ruleset."""
        with self._lock:
            self.close_locked()


def _build(level: int, handled: int, rules: list[Rule]) -> int:
    """A ruleset handling only ``handled`` (file access), with ``rules``."""
    fd = abi.create_ruleset(level, fs=handled)
    try:
        for rule in rules:
            access = rule.access & handled
            if access:
                with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                    abi.add_path_rule(fd, rule.path, access, exact=True)
    except BaseException:
        os.close(fd)
        raise
    return fd
