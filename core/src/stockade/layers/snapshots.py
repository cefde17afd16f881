"""Snapshots and forks of a workspace: a public API for rollouts and experiments.

    snap = snapshots.take("/work/proj", store=store)     # an immutable copy, by id
    forks = snapshots.fork(snap, 8, store=store)         # 8 workspaces sharing its files
    ... run commands with ExecRequest(..., workspace=forks[i]) ...
    snapshots.export(snap, stream)                       # a tar stream of it
    snapshots.discard_fork(forks[0], store=store); snapshots.discard(snap)

A **snapshot** is a copy of a workspace's committed state (files, folders, symlinks, modes
and times; the protected names it holds too) under ``<store>/snapshots/ID/``, which every
sandbox masks: no command can change it. Its id is random and names it for good.

A **fork** is a workspace of its own, ``<store>/workspaces/.forks/ID/N/``, whose files are
hard links to the snapshot's: making N forks costs one link per file, not N copies. They
stay shared only because nothing ever writes a fork's file in place: a layered command
(bubblewrap) writes into its own layer, and landing replaces a file by a rename (a new
inode), never rewrites it. So a command whose writes would be direct (Landlock, ``layers =
false``) is refused in a fork (``SandboxUnavailable``), before it starts:
:func:`refuse_direct`.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tarfile
import time
from typing import BinaryIO

from attrs import frozen

from ..errors import SandboxUnavailable, UsageError
from .place import remove_tree

SNAPSHOTS = "snapshots"
FORKS = os.path.join("workspaces", ".forks")
"""Where forks live: among the workspaces of the store, which may be writable roots."""


@frozen
class Snapshot:
    """An immutable copy of a workspace.

    Attributes:
        id: its name for good (``snap-`` and 16 hex digits).
        folder: where its files are (in the store; hidden from every sandbox).
        source: the workspace it was taken from.
        taken: when, in seconds since the epoch.
    """

    id: str
    folder: str
    source: str
    taken: float


def _tree(store: str, snapshot_id: str) -> str:
    if not snapshot_id.startswith("snap-") or not snapshot_id[5:].isalnum():
        raise UsageError(f"{snapshot_id!r} is not a snapshot id", hint="ids look like snap-1a2b...")
    return os.path.join(store, SNAPSHOTS, snapshot_id)


def take(folder: str, *, store: str) -> Snapshot:
    """Copy ``folder`` (its committed state: take it between commands) into a new snapshot.

    Raises:
        UsageError: ``folder`` is not a folder.
    """
    source = os.path.realpath(folder)
    if not os.path.isdir(source):
        raise UsageError(f"{folder} is not a folder", hint="snapshot a workspace folder")
    snapshot_id = "snap-" + secrets.token_hex(8)
    target = _tree(store, snapshot_id)
    os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
    partial = target + ".partial"
    shutil.copytree(source, partial, symlinks=True)
    with open(os.path.join(os.path.dirname(target), f"{snapshot_id}.source"), "w") as note:
        note.write(source)
    os.rename(partial, target)  # whole, or not there at all
    return Snapshot(snapshot_id, target, source, time.time())


def get(snapshot_id: str, *, store: str) -> Snapshot:
    """The snapshot named ``snapshot_id``.

    Raises:
        UsageError: there is none by that id (discarded, or never taken).
    """
    target = _tree(store, snapshot_id)
    if not os.path.isdir(target):
        raise UsageError(f"no snapshot {snapshot_id}", hint="take one with snapshots.take")
    try:
        with open(os.path.join(os.path.dirname(target), f"{snapshot_id}.source")) as note:
            source = note.read()
    except OSError:
        source = ""
    return Snapshot(snapshot_id, target, source, os.stat(target).st_mtime)


def fork(snapshot: Snapshot, count: int, *, store: str) -> tuple[str, ...]:
    """``count`` new workspaces holding the snapshot's files (hard links to them)."""
    base = os.path.join(store, FORKS, snapshot.id)
    os.makedirs(os.path.dirname(base), mode=0o700, exist_ok=True)
    os.makedirs(base, mode=0o700, exist_ok=True)
    made: list[str] = []
    for _ in range(count):
        target = os.path.join(base, secrets.token_hex(4))
        shutil.copytree(snapshot.folder, target, symlinks=True, copy_function=os.link)
        shutil.copystat(snapshot.folder, target)
        made.append(target)
    return tuple(made)


def forks(snapshot: Snapshot, *, store: str) -> tuple[str, ...]:
    """The forks of ``snapshot`` that exist."""
    base = os.path.join(store, FORKS, snapshot.id)
    try:
        return tuple(sorted(os.path.join(base, n) for n in os.listdir(base)))
    except FileNotFoundError:
        return ()


def is_fork(folder: str, *, store: str) -> bool:
    """Whether ``folder`` is (or lies in) a fork."""
    base = os.path.realpath(os.path.join(store, FORKS)) + "/"
    return os.path.realpath(folder).startswith(base)


def refuse_direct(workspace: str, store: str, provider: str) -> None:
    """Refuse a command that would write a fork's files in place (see the module).

    Raises:
        SandboxUnavailable: ``workspace`` is a fork.
    """
    if is_fork(workspace, store=store):
        raise SandboxUnavailable(
            f"{workspace} is a fork, whose files it shares with its snapshot; under {provider} "
            "a command would write them in place",
            hint="run commands in forks under bubblewrap with layers (see `stockade doctor`)",
            details={"workspace": workspace},
        )


def export(snapshot: Snapshot, out: BinaryIO) -> None:
    """Write the snapshot to ``out`` as a tar stream (paths relative to its root; symlinks
    as links, never followed)."""
    with tarfile.open(fileobj=out, mode="w|") as tar:
        for name in sorted(os.listdir(snapshot.folder)):
            tar.add(os.path.join(snapshot.folder, name), arcname=name, recursive=True)


def discard_fork(folder: str, *, store: str) -> None:
    """Remove a fork.

    Raises:
        UsageError: ``folder`` is not a fork.
    """
    real = os.path.realpath(folder)
    if not is_fork(real, store=store) or os.path.dirname(os.path.dirname(real)) != os.path.join(
        os.path.realpath(store), FORKS
    ):
        raise UsageError(f"{folder} is not a fork", hint="pass a folder snapshots.fork made")
    remove_tree(real)


def discard(snapshot: Snapshot, *, store: str) -> None:
    """Remove a snapshot and every fork of it."""
    remove_tree(os.path.join(store, FORKS, snapshot.id))
    remove_tree(snapshot.folder)
    note = os.path.join(os.path.dirname(snapshot.folder), f"{snapshot.id}.source")
    if os.path.lexists(note) and not stat.S_ISDIR(os.lstat(note).st_mode):
        os.unlink(note)
