"""Forks from the layered workspaces' snapshots (:mod:`stockade.layers.snapshots`), where a
node's commands write through layers; a copy where they do not.

A snapshot is taken as :class:`~stockade_ray.forks.CopySnapshots` takes it (a tar archive in
Ray's object store, so any node can have it). On a node whose steps write through layers
(bubblewrap with its overlay: the worker asks its own sandbox, as ``stockade doctor`` does),
the archive becomes a layers' snapshot in the node's store once (the first fork there
pays that copy, under a lock so two workers of a node never both do), and every fork is
:func:`stockade.layers.snapshots.fork`: a workspace whose files are hard links to the
snapshot's, no copy. Those forks are safe to share only because a layered command never
writes a file in place; a step that would (Landlock, ``layers = false``) is refused in a
fork by core (``SandboxUnavailable``) rather than spoil its siblings. Where a node's steps
would write directly, the fork is a copy, and its :class:`~stockade_ray.forks.Forked` says
so and why.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Any

from stockade import owned
from stockade.errors import StockadeError, UsageError
from stockade.layers import snapshots as layers
from stockade.layers.place import remove_tree

from .forks import CopySnapshots, Forked, Snapshot, copy_into, unpack

INDEX = "ray-snapshots"
"""The store's folder naming, per pool, the layers' snapshot made of each archive here."""


class LayeredSnapshots(CopySnapshots):
    """Forks from the layers' snapshots where a node's steps are layered, else copies.

    The default of :class:`~stockade_ray.pool.StockadePool`."""

    def fork_into(
        self, snapshot: Snapshot, into: str, *, store: str, pool: str, refusal: str | None
    ) -> Forked:
        """A fork of ``snapshot`` for one episode on this node: ``into`` (a copy) when
        ``refusal`` says why this node's steps would not be layered, else a fork of the
        node's layers' snapshot of it (wherever core puts forks)."""
        if refusal is not None:
            return copy_into(snapshot, into, why=refusal)
        node = node_snapshot(snapshot, store=store, pool=pool)
        (made,) = layers.fork(node, 1, store=store)
        return Forked(made, "layers", "", snapshot.files, node.folder)


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
    any more (a closed episode's kept workspace keeps its snapshot); the ids kept."""
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
    if not kept:
        shutil.rmtree(index, ignore_errors=True)
    return kept


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
    folder = tempfile.mkdtemp(prefix="probe-", dir=base)
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
        remove_tree(folder)
    if writes == "layered":
        return None
    name = plan.facts.provider
    return f"the {name} sandbox here writes {mode} steps directly, not through layers"


__all__ = ["LayeredSnapshots", "forget_pool", "layers_refusal"]
