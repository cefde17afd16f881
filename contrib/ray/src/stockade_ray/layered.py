"""Forks from the layered workspaces' snapshots (:mod:`stockade.layers.snapshots`) where a
node has them; a copy where it does not.

A snapshot is taken as :class:`~stockade_ray.forks.CopySnapshots` takes it (a tar archive in
Ray's object store, so any node can have it). On a node that can fork from layers, the
archive becomes a layers' snapshot in the node's store once (the first fork there pays that
copy, under a lock so two workers of a node never both do), and every fork is
:func:`stockade.layers.snapshots.fork_one` of it:

- ``overlay`` where the worker may mount one (root; :mod:`stockade.layers.mounts`): one
  mount, whatever the workspace's size; nothing written in it reaches the snapshot or a
  sibling, so any sandbox's steps may run there (Landlock's direct writes too);
- else ``layers``: a workspace whose files are hard links to the snapshot's, no copy, safe
  to share only because a layered command never writes a file in place; taken only where
  the node's steps write through layers (bubblewrap with its overlay: the worker asks its
  own sandbox, as ``stockade doctor`` does), since core refuses a step that would write one
  directly (``SandboxUnavailable``) rather than spoil its siblings;
- else a copy. :class:`~stockade_ray.forks.Forked` says which, and why not the one before.

A pool's workers hold a shared lock on ``ray-snapshots/POOL.live`` while they live (the file
at that path when locked: one another pool unlinked meanwhile is let go and the new one
locked, and a pool that locks a file unlinked meanwhile discards nothing by it); a pool
that shut down cleanly and kept forks (episodes closed with ``close()``) leaves
``POOL.closed``. When a worker starts (:func:`start_pool`), every other pool of the node's
store with neither, whose workers were killed with their driver, has its snapshots and
forks discarded (each fork unmounted), and mounts left by a killed discard are swept.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from typing import Any

from stockade import owned
from stockade.errors import StockadeError, UsageError
from stockade.layers import mounts
from stockade.layers import snapshots as layers
from stockade.trees import remove_tree

from .forks import CopySnapshots, Forked, Snapshot, copy_into, unpack

INDEX = "ray-snapshots"
"""The store's folder naming, per pool, the layers' snapshot made of each archive here."""


class LayeredSnapshots(CopySnapshots):
    """Forks from the layers' snapshots where a node's steps are layered, else copies.

    The default of :class:`~stockade_ray.pool.StockadePool`.

    Args:
        overlay: mount an overlay where the worker may (``False``: hard links at best).
    """

    def __init__(self, *, overlay: bool = True) -> None:
        self.overlay = overlay

    def fork_into(
        self, snapshot: Snapshot, into: str, *, store: str, pool: str, refusal: str | None
    ) -> Forked:
        """A fork of ``snapshot`` for one episode on this node: of the node's layers'
        snapshot of it (an overlay where this worker may mount one, else hard links when
        ``refusal`` is ``None``), else ``into`` (a copy), saying why."""
        overlay = mounts.refusal(store) if self.overlay else "hard links were asked for"
        if overlay is not None and refusal is not None:
            return copy_into(snapshot, into, why=f"{refusal}; and {overlay}")
        node = node_snapshot(snapshot, store=store, pool=pool)
        made = layers.fork_one(node, store=store, overlay=self.overlay)
        if made.method == "links" and refusal is not None:  # this one's overlay was refused
            layers.discard_fork(made.folder, store=store)
            return copy_into(snapshot, into, why=f"{refusal}; and {made.why}")
        if made.method == "overlay":
            return Forked(made.folder, "overlay", "", snapshot.files, node.folder)
        return Forked(made.folder, "layers", made.why, snapshot.files, node.folder)


def node_snapshot(snapshot: Snapshot, *, store: str, pool: str) -> layers.Snapshot:
    """The layers' snapshot of ``snapshot`` in this node's ``store``, made from its archive
    the first time a worker of ``pool`` here asks (the others wait for it)."""
    import ray

    index = os.path.join(store, INDEX, pool)
    os.makedirs(index, mode=0o700, exist_ok=True)
    named = os.path.join(index, snapshot.digest)
    with owned.locked(named + ".lock"):
        with contextlib.suppress(OSError, UsageError), open(named) as known:
            return layers.get(known.read().strip(), store=store)
        unpacked = tempfile.mkdtemp(prefix="unpack-", dir=index)
        try:
            tree = os.path.join(unpacked, "tree")
            data = snapshot.data
            unpack(data if isinstance(data, bytes) else ray.get(data), tree)
            taken = layers.take(tree, store=store)
        finally:
            remove_tree(unpacked)
        with open(named + ".new", "w") as note:
            note.write(taken.id)
        os.replace(named + ".new", named)
        return taken


def forget_pool(store: str, pool: str) -> list[str]:
    """Discard the layers' snapshots ``pool`` made in this node's store that no fork uses
    any more (a closed episode's kept workspace keeps its snapshot), after sweeping the
    mounts a killed discard left; the ids kept (then ``POOL.closed`` says so to
    :func:`start_pool`)."""
    layers.sweep(store)
    index = os.path.join(store, INDEX, pool)
    kept: list[str] = []
    try:
        names = sorted(os.listdir(index))
    except FileNotFoundError:
        return kept
    for name in names:
        if name.endswith((".lock", ".new")) or name.startswith("unpack-"):
            continue
        try:
            with open(os.path.join(index, name)) as known:
                found = layers.get(known.read().strip(), store=store)
        except (OSError, UsageError):
            continue
        if layers.forks(found, store=store):
            kept.append(found.id)
            continue
        layers.discard(found, store=store)
    if kept:
        with open(index + ".closed", "w") as note:
            note.write("\n".join(kept))
    else:
        remove_tree(index)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(index + ".closed")
    return kept


def start_pool(store: str, pool: str) -> int:
    """Hold ``pool``'s live lock on this node (the descriptor returned: kept open while the
    worker lives), then discard what dead pools left here (see the module)."""
    base = os.path.join(store, INDEX)
    os.makedirs(base, mode=0o700, exist_ok=True)
    live = _lock_live(base, pool)
    for name in sorted(os.listdir(base)):
        folder = os.path.join(base, name)
        if name == pool or not os.path.isdir(folder) or os.path.exists(folder + ".closed"):
            continue
        other = _open_live(base, name)
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(other)
            continue  # its workers live
        if not _current(other, base, name):
            os.close(other)
            continue  # unlinked by another pool meanwhile: a worker may hold the new one
        try:
            _discard_pool(store, folder)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(base, f"{name}.live"))
        finally:
            os.close(other)
    layers.sweep(store)
    return live


def _lock_live(base: str, pool: str) -> int:
    """``pool``'s live file, opened and locked shared: the one at its path when locked
    (a file another pool unlinked while this waited for its lock is closed, and the new
    one taken), so no pool takes this one's forks for a dead pool's."""
    while True:
        live = _open_live(base, pool)
        fcntl.flock(live, fcntl.LOCK_SH)
        if _current(live, base, pool):
            return live
        os.close(live)


def _current(fd: int, base: str, pool: str) -> bool:
    """Whether ``fd`` is the file at ``pool``'s live path (not one unlinked meanwhile)."""
    try:
        named = os.stat(os.path.join(base, f"{pool}.live"), follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def _open_live(base: str, pool: str) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(os.path.join(base, f"{pool}.live"), flags, 0o600)


def _discard_pool(store: str, index: str) -> None:
    """Every layers' snapshot a dead pool made here, with its forks."""
    for name in sorted(os.listdir(index)):
        if name.endswith((".lock", ".new")) or name.startswith("unpack-"):
            continue
        with contextlib.suppress(OSError, UsageError), open(os.path.join(index, name)) as known:
            layers.discard(layers.get(known.read().strip(), store=store), store=store)
    remove_tree(index)


def layers_refusal(doer: Any, store: str, mode: str) -> str | None:  # noqa: ANN401 - a Doer
    """Why a forked episode's steps (in ``mode``) would not write through layers on this
    node (``None``: they would), from a plan the node's own sandbox makes, as ``stockade
    doctor`` asks it; nothing runs."""
    from stockade.policy.resolve import resolve
    from stockade.request.spec import ExecRequest

    if mode == "read-only":
        return None  # nothing it runs writes
    if mode == "danger-full-access":
        return "danger-full-access steps run unconfined, writing their folder directly"
    base = os.path.join(store, layers.FORKS)
    os.makedirs(base, mode=0o700, exist_ok=True)
    probe = tempfile.mkdtemp(prefix="probe-", dir=base)
    folder = os.path.join(probe, "fork")  # a fork's depth: the folder of forks is no root
    os.mkdir(folder, 0o700)
    try:
        request = ExecRequest(("true",), folder, mode=mode, workspace=folder)  # type: ignore[arg-type]
        spec = resolve(request, doer.config, os.environ)
        provider = doer.providers.provider_for(spec)
        plan = provider.confine(spec)
        writes = plan.facts.writes
        provider.release(plan)
    except StockadeError as error:
        return f"no sandbox here layers a fork: {error.message}"
    finally:
        remove_tree(probe)
    if writes == "layered":
        return None
    name = plan.facts.provider
    return f"the {name} sandbox here writes {mode} steps directly, not through layers"


__all__ = ["LayeredSnapshots", "forget_pool", "layers_refusal", "start_pool"]
