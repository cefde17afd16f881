"""Snapshots and forks of a workspace: a public API for rollouts and experiments.

    snap = snapshots.take("/work/proj", store=store)     # an immutable copy, by id
    forks = snapshots.fork(snap, 8, store=store)         # 8 workspaces sharing its files
    ... run commands with ExecRequest(..., workspace=forks[i]) ...
    snapshots.export(snap, stream)                       # a tar stream of it
    snapshots.discard_fork(forks[0], store=store); snapshots.discard(snap)

A **snapshot** is a copy of a workspace's committed state (files, folders, symlinks, modes
and times; the protected names it holds too) under ``<store>/snapshots/ID/``, which every
sandbox masks: no command can change it. Its id is random and names it for good.

A **fork** is a workspace of its own, ``<store>/workspaces/.forks/ID/N/``, made one of two
ways (:func:`fork_one` says which, and why):

- ``overlay`` (where :func:`stockade.layers.mounts.refusal` allows: root, a kernel with
  overlayfs, a store not on an overlay): an overlay mounted on the folder, the snapshot its
  lower layer and ``<store>/forks/ID/N/`` its own upper one. One mount, whatever the
  workspace's size; nothing written through it, by any writer, reaches the snapshot or a
  sibling, so a command whose writes are direct (Landlock) may run in it.
- ``links``: its files are hard links to the snapshot's (one link per file). They stay
  shared only because nothing writes a fork's file in place: a layered command (bubblewrap)
  writes into its own layer, and landing replaces a file by a rename (a new inode), never
  rewrites it. So a command whose writes would be direct (Landlock, ``layers = false``) is
  refused in such a fork (``SandboxUnavailable``), before it starts: :func:`refuse_direct`.

Discarding a fork unmounts it first (lazily if busy); a mount whose fork is gone or half
discarded (a process killed meanwhile) is found in ``/proc/self/mountinfo`` and removed by
the next discard (:func:`sweep`). A fork whose mount is gone (a reboot) is mounted again
before its next command (:func:`remount`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import tarfile
import time
from typing import BinaryIO, Literal

from attrs import frozen

from .. import resolved
from ..errors import SandboxUnavailable, UnsafeRoot, UsageError
from ..tree_copy import copy_tree
from ..trees import remove_tree, walk
from . import across, marks, mounts

SNAPSHOTS = "snapshots"
FORKS = mounts.FORKS
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


def take(folder: str, *, store: str, record: str | None = None) -> Snapshot:
    """Copy ``folder`` (its committed state: take it between commands) into a new snapshot;
    its files lose their setuid and setgid bits, and the files the breaker marked private in
    it stay marked in every fork (:mod:`~stockade.layers.marks`; ``record``: the record's
    file when the store's ``store.path`` names one other than ``store.db``).

    Raises:
        UsageError: ``folder`` is not a folder.
    """
    source = resolved.realpath(folder)
    if not os.path.isdir(source):
        raise UsageError(f"{folder} is not a folder", hint="snapshot a workspace folder")
    snapshot_id = "snap-" + secrets.token_hex(8)
    target = _tree(store, snapshot_id)
    os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
    partial = target + ".partial"
    copy_tree(source, partial)  # without recursion: a command may have made it deep
    for visit in walk(partial):
        for name in visit.others:
            across.drop_privileges(visit.fd, name)  # no fork gets a setuid program from its source
    with open(os.path.join(os.path.dirname(target), f"{snapshot_id}.source"), "w") as note:
        note.write(source)
    marks.keep(source, f"{target}.private", store=store, record=record)
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


@frozen
class Fork:
    """A fork, and how it was made.

    Attributes:
        folder: the workspace.
        method: ``overlay`` (a mount: constant time) or ``links`` (a hard link a file).
        why: for ``links``, why not an overlay.
    """

    folder: str
    method: Literal["overlay", "links"]
    why: str = ""


def fork(snapshot: Snapshot, count: int, *, store: str) -> tuple[str, ...]:
    """``count`` new workspaces holding the snapshot's files (see the module)."""
    return tuple(fork_one(snapshot, store=store).folder for _ in range(count))


def fork_one(
    snapshot: Snapshot,
    *,
    store: str,
    overlay: bool = True,
    at: str | None = None,
    record: str | None = None,
) -> Fork:
    """A new workspace holding the snapshot's files: an overlay where this process may
    mount one (and ``overlay``), else hard links (:class:`Fork` says which, and why).
    ``at``: a fork of this snapshot that is gone (discarded, or lost with its disk), made
    again at the same path.

    Raises:
        UsageError: ``at`` is not a path of this snapshot's forks, or is there still.
    """
    base = os.path.join(store, FORKS, snapshot.id)
    os.makedirs(os.path.dirname(base), mode=0o700, exist_ok=True)
    os.makedirs(base, mode=0o700, exist_ok=True)
    target = os.path.join(base, secrets.token_hex(4))
    if at is not None:
        target = os.path.join(base, os.path.basename(at))
        if _root(at, store) != resolved.realpath(target) or os.path.lexists(target):
            raise UsageError(f"{at} is not a gone fork of {snapshot.id}", hint="fork anew")
        _clear(_layer(store, target))
        marks.drop(resolved.realpath(target), store=store, record=record)  # the gone one's
    why = mounts.refusal(store) if overlay else "hard links were asked for"
    if why is None:
        layer = _layer(store, target)
        os.makedirs(os.path.dirname(layer), mode=0o700, exist_ok=True)
        os.mkdir(layer, 0o700)
        for part in ("upper", "work"):
            os.mkdir(os.path.join(layer, part), 0o700)
        shutil.copystat(snapshot.folder, os.path.join(layer, "upper"))  # the fork root's own
        os.mkdir(target, 0o700)
        try:
            mounts.mount(snapshot.folder, *_parts(layer), target)
        except OSError as error:
            why = f"the kernel refused this fork's overlay: {error.strerror}"
            os.rmdir(target)
            remove_tree(layer)
        else:
            _inherit(snapshot, target, store, record)
            return Fork(target, "overlay")
    copy_tree(snapshot.folder, target, link=True)
    shutil.copystat(snapshot.folder, target)
    _inherit(snapshot, target, store, record)
    return Fork(target, "links", why)


def _inherit(snapshot: Snapshot, fork: str, store: str, record: str | None) -> None:
    """The snapshot's private-file marks, marked for the fork (before any command runs)."""
    marks.give(f"{snapshot.folder}.private", resolved.realpath(fork), store=store, record=record)


def _layer(store: str, fork: str) -> str:
    """The fork's own layer folder: ``<store>/forks/SNAP/N`` for ``.forks/SNAP/N``."""
    snap, name = fork.rstrip("/").split("/")[-2:]
    return os.path.join(store, mounts.LAYERS, snap, name)


def _parts(layer: str) -> tuple[str, str]:
    return os.path.join(layer, "upper"), os.path.join(layer, "work")


def _base(store: str) -> str:
    """``<store>/workspaces/.forks`` with the store resolved, never a link at ``.forks``."""
    return os.path.join(resolved.realpath(os.path.dirname(os.path.join(store, FORKS))), ".forks")


def _root(folder: str, store: str) -> str | None:
    """The fork ``folder`` is (or lies in), resolved; ``None`` when it is in none."""
    base = _base(store)
    rel = os.path.relpath(resolved.realpath(folder), base).split("/")
    if rel[0] in (".", "..") or len(rel) < 2:
        return None
    return os.path.join(base, rel[0], rel[1])


def overlaid(folder: str, *, store: str) -> bool:
    """Whether ``folder`` is (or lies in) a fork mounted as an overlay: what is written in
    it, whoever writes, stays its own."""
    root = _root(folder, store)
    return root is not None and mounts.is_overlay(root)


def remount(folder: str, *, store: str) -> bool:
    """Mount again an overlay fork ``folder`` lies in whose mount is gone (a reboot, another
    mount namespace's cleanup); whether it did. Its files were never in the bare folder.

    Raises:
        SandboxUnavailable: it could not be mounted (its commands would see an empty folder).
    """
    root = _root(folder, store)
    if root is None or not os.path.isdir(os.path.join(_layer(store, root), "upper")):
        return False
    if mounts.is_overlay(root):
        return False
    snapshot = os.path.join(store, SNAPSHOTS, os.path.basename(os.path.dirname(root)))
    try:
        mounts.mount(snapshot, *_parts(_layer(store, root)), root)
    except OSError as error:
        raise SandboxUnavailable(
            f"{root} is a fork whose overlay is no longer mounted, and mounting it again "
            f"failed: {error.strerror}",
            hint="run it as the user who forked it (root), or discard the fork",
            details={"workspace": root},
        ) from error
    return True


def forks(snapshot: Snapshot, *, store: str) -> tuple[str, ...]:
    """The forks of ``snapshot`` that exist."""
    base = os.path.join(store, FORKS, snapshot.id)
    try:
        if not stat.S_ISDIR(os.lstat(base).st_mode):
            return ()  # a link put in its place: nothing of it is a fork
        return tuple(sorted(os.path.join(base, n) for n in os.listdir(base)))
    except FileNotFoundError:
        return ()


def is_fork(folder: str, *, store: str) -> bool:
    """Whether ``folder`` is (or lies in) a fork."""
    return resolved.realpath(folder).startswith(_base(store) + "/")


def holds_forks(folder: str, *, store: str) -> bool:
    """Whether writing in ``folder`` could move or change forks from outside them: it is
    (or holds) ``<store>/workspaces/.forks`` or a snapshot's folder of forks in it, or is,
    holds or lies in the store's snapshots or the forks' own layers. A fork's root and what
    is in it are not: what is written there stays in the fork (or is refused, for links)."""
    real = resolved.realpath(folder).rstrip("/") or "/"
    above = real.rstrip("/") + "/"
    store_real = resolved.realpath(store)
    for kept in (os.path.join(store_real, SNAPSHOTS), os.path.join(store_real, mounts.LAYERS)):
        if real == kept or real.startswith(kept + "/") or kept.startswith(above):
            return True
    base = _base(store)
    if real == base or base.startswith(above):
        return True
    rel = os.path.relpath(real, base).split("/")
    return rel[0] != ".." and len(rel) == 1


def refuse_holders(roots: tuple[str, ...], store: str) -> None:
    """Refuse writable roots that hold forks (:func:`holds_forks`), whatever the sandbox:
    a direct writer there would write a fork's shared files in place or move a fork's
    mounts, and a landing would rename over them.

    Raises:
        UnsafeRoot: one does (named, with the store's folder it is about).
    """
    for root in roots:
        if holds_forks(root, store=store):
            raise UnsafeRoot(
                f"refusing {root} as a writable root: it is or holds Stockade's forks, "
                f"snapshots or their layers (in {store}), which a command there could change "
                "or move for every fork",
                hint="run the command in one fork (a folder snapshots.fork made), never in "
                "the folder of forks or the store's snapshots",
                details={"path": root, "rule": "forks", "folder": store},
            )


def refuse_direct(workspace: str, store: str, provider: str) -> None:
    """Refuse a command that would write a fork's shared files in place (see the module).

    Raises:
        SandboxUnavailable: ``workspace`` is a fork of hard links (an overlay fork is not).
    """
    if is_fork(workspace, store=store) and not overlaid(workspace, store=store):
        raise SandboxUnavailable(
            f"{workspace} is a fork whose files are hard links to its snapshot's; under {provider} "
            "a command would write them in place",
            hint="run commands in forks under bubblewrap with layers (see `stockade doctor`)",
            details={"workspace": workspace},
        )


def export(snapshot: Snapshot, out: BinaryIO) -> None:
    """Write the snapshot to ``out`` as a tar stream (paths relative to its root; symlinks
    as links, never followed; no file setuid or setgid)."""
    with tarfile.open(fileobj=out, mode="w|") as tar:
        for name in sorted(os.listdir(snapshot.folder)):
            tar.add(os.path.join(snapshot.folder, name), arcname=name, filter=_plain)


def _plain(entry: tarfile.TarInfo) -> tarfile.TarInfo:
    """An entry with no setuid or setgid bit (a file's: see :data:`.across.SAFE`)."""
    if entry.isfile():
        entry.mode &= across.SAFE  # (TarInfo.replace is Python 3.12's)
    return entry


def discard_fork(folder: str, *, store: str, record: str | None = None) -> None:
    """Remove a fork: its layer's folder first (what marks it gone), then its mount (lazily
    when busy), then its folder and its private-file marks (in ``record``,
    :mod:`~stockade.layers.marks`); its layer then, unless the mount was busy (a process
    still writes in it: the sweep removes it once none does).

    Raises:
        UsageError: ``folder`` is not a fork (a link to one is not either).
        OSError: its mount could not be removed (nothing of its folder was).
    """
    real = _folder(folder)
    if real is None or _root(real, store) != real:
        raise UsageError(f"{folder} is not a fork", hint="pass a folder snapshots.fork made")
    layer = _layer(store, real)
    gone = f"{layer}.gone"
    if os.path.lexists(layer):
        remove_tree(gone)
        os.rename(layer, gone)
    device = os.stat(real).st_dev if mounts.is_overlay(real) else None
    busy = _drop(real, store)
    marks.drop(real, store=store, record=record)
    if busy and device is not None:
        with open(f"{layer}.busy", "w") as note:
            note.write(str(device))
    else:
        remove_tree(gone)
    sweep(store)


def _folder(path: str) -> str | None:
    """``path`` with its folders above resolved and itself not (``None``: it is missing).

    Raises:
        UsageError: it is not a real folder (a link or a file put in its place).
    """
    path = os.path.normpath(os.path.abspath(path))
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(info.st_mode):
        raise UsageError(
            f"{path} is not a folder (a link, or a file, was put in its place): refused, "
            "nothing it names was followed",
            hint="look at what it is and remove it by hand; then discard again",
            details={"path": path},
        )
    return os.path.join(resolved.realpath(os.path.dirname(path)), os.path.basename(path))


def _drop(point: str, store: str) -> bool:
    """Unmount ``point`` (a fork, or a snapshot's folder of forks) and whatever is mounted
    beneath it, then remove its folder; whether a mount was busy (detached lazily).

    Raises:
        UsageError: ``point`` is not a real folder, or a mount beneath it is not a fork's.
        OSError: a mount could not be removed (nothing of the folder was).
    """
    real = _folder(point)
    if real is None:
        return False
    lazily = False
    for inner in (*mounts.overlays_beneath(real), *([real] * mounts.is_overlay(real))):
        if _root(inner, store) is None:
            raise UsageError(f"{inner} is mounted, and not as a fork", hint="unmount it by hand")
        lazily |= mounts.unmount(inner)
    if mounts.is_overlay(real) or mounts.overlays_beneath(real):
        raise OSError(f"{real} is still mounted")  # never remove through a mount
    remove_tree(real)
    return lazily


def sweep(store: str) -> list[str]:
    """Unmount and remove the forks left mounted with no layer of their own any more (a
    process killed while it discarded them, or their snapshot's discard), and the layers of
    forks gone whose detached mount no process uses any more; the folders removed. A fork
    whole (its layer there) is a workspace in use, and stays.

    Call it after a process that forked was killed (see ``docs/workspaces.md``): nothing
    else finds what it left mounted until the next discard in the same store."""
    base = _base(store)
    swept = []
    for point in mounts.overlays_beneath(base):
        root = _root(point, store)
        if root is None or os.path.isdir(_layer(store, root)):
            continue
        with contextlib.suppress(OSError, UsageError):
            _drop(root, store)
            swept.append(root)
    layers = os.path.join(store, mounts.LAYERS)
    for directory, folders, _ in os.walk(layers):
        for name in folders:
            if name.endswith(".gone") and not os.path.lexists(
                os.path.join(base, os.path.basename(directory), name[:-5])
            ):
                _clear(os.path.join(directory, name[:-5]))
        if directory != layers:
            folders[:] = []
            if not os.path.isdir(os.path.join(store, SNAPSHOTS, os.path.basename(directory))):
                with contextlib.suppress(OSError):
                    os.rmdir(directory)  # its snapshot discarded, its last layer gone
    return swept


def mounted(store: str) -> tuple[str, ...]:
    """The forks of ``store`` mounted now, whole or not: after a process that forked was
    killed, what it left (discard each with :func:`discard_fork`, or their snapshots with
    :func:`discard`; a reboot unmounts them, and a fork is mounted again before its next
    command)."""
    roots = (_root(point, store) for point in mounts.overlays_beneath(_base(store)))
    return tuple(sorted({root for root in roots if root is not None}))


def _clear(layer: str) -> None:
    """Remove a gone fork's layer (``LAYER.gone``), unless its detached mount is in use."""
    note = f"{layer}.busy"
    with contextlib.suppress(FileNotFoundError, ValueError), open(note) as busy:
        if mounts.in_use(int(busy.read())):
            return
    remove_tree(f"{layer}.gone")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(note)


def discard(snapshot: Snapshot, *, store: str) -> None:
    """Remove a snapshot and every fork of it (each fork unmounted first)."""
    for fork_folder in forks(snapshot, store=store):
        with contextlib.suppress(UsageError):
            discard_fork(fork_folder, store=store)
    _drop(os.path.join(store, FORKS, snapshot.id), store)
    own = os.path.join(store, mounts.LAYERS, snapshot.id)
    with contextlib.suppress(OSError):
        for name in os.listdir(own):  # a fork's whose discard failed: gone with its mount
            if not name.endswith((".gone", ".busy")):
                os.rename(os.path.join(own, name), os.path.join(own, f"{name}.gone"))
    remove_tree(snapshot.folder)
    sweep(store)  # the layers of a fork still busy wait for a later sweep
    remove_tree(snapshot.folder)
    for suffix in ("source", "private"):
        note = os.path.join(os.path.dirname(snapshot.folder), f"{snapshot.id}.{suffix}")
        if os.path.lexists(note) and not stat.S_ISDIR(os.lstat(note).st_mode):
            os.unlink(note)
