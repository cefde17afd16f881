"""The scratch list: the host folders a confining sandbox replaces with private, empty ones.

Host sockets (an agent's, a session bus, ``docker.sock``) and other users' files live in
``/tmp``, ``/var/tmp``, ``/run`` and ``/dev/shm``; tools keep tokens and downloads in a home's
``.cache``. A command sees none of the host's: each is replaced by an empty folder of the
run's own (bubblewrap mounts a tmpfs over it; Landlock denies it and points ``TMPDIR`` at a
private directory). A writable root or the run's home that lies in one of them is shown
again at its own path. One list, read by every provider, so a fix reaches all.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from .. import resolved
from .protected import inside

__all__ = ["HOME_SCRATCH", "SCRATCH_DIRS", "private_folders"]

SCRATCH_DIRS = ("/tmp", "/var/tmp", "/run", "/var/run", "/dev/shm")  # noqa: S108 - the list
"""The host's shared scratch and socket folders, replaced by empty private ones."""

HOME_SCRATCH = (".cache",)
"""Folders of every home in use replaced by empty private ones (tools' caches and tokens),
unless a writable root holds them."""


def private_folders(
    homes: Iterable[str], writable: Iterable[str] = (), *, dirs: Iterable[str] = SCRATCH_DIRS
) -> list[str]:
    """The folders to replace with empty private ones for a run, outer ones only, each once.

    Every existing ``dirs`` entry (:data:`SCRATCH_DIRS`) that is a real folder (``/var/run``
    is most often a symlink to ``/run``, which is then already covered), and
    :data:`HOME_SCRATCH` under each of ``homes`` (see :func:`stockade.confine.protected.homes`)
    unless it lies in one of ``writable`` or in a folder already listed.
    """
    roots = [resolved.realpath(w) for w in writable]
    found: list[str] = []
    for path in dirs:
        if os.path.isdir(path) and not os.path.islink(path) and path not in found:
            found.append(path)
    for home in homes:
        for name in HOME_SCRATCH:
            path = os.path.join(home, name)
            usable = os.path.isdir(path) and not os.path.islink(path)
            if usable and not inside(path, [*roots, *found]):
                found.append(path)
    return found
