"""Files and folders kept to the user who runs Stockade: a folder made ``0700`` with the one
above it, and a lock file held exclusively.

Below every package (it imports only the standard library), so the layers' commit, the
host's checks after a run, the answers to waiting layers and the warm server's start share
one of each.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator


def private(folder: str) -> None:
    """``folder`` and the folder holding it made ``0700``, the folders above made as needed
    (``makedirs`` gives the folders it makes on the way the default mode, so the two that
    hold what is kept are made and set here)."""
    above = os.path.dirname(folder)
    os.makedirs(os.path.dirname(above), mode=0o700, exist_ok=True)
    for path in (above, folder):
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        os.chmod(path, 0o700)


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (made ``0600`` if need be, never through a
    symlink), held for the block."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
