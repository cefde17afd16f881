"""The SDK's workspace snapshots on Stockade's own (:mod:`stockade.layers.snapshots`).

``client.create(snapshot=StockadeSnapshotSpec(), ...)`` gives a session whose ``stop`` (the
runner stops its session at every interruption and at the end) takes a Stockade snapshot of
the workspace, an immutable copy in the store that no sandbox can see, instead of writing
a tar of it; a session resumed from that state puts the snapshot back into its workspace.
One SDK snapshot holds one Stockade snapshot: persisting again replaces (and discards) the
one before, as the SDK's local snapshot overwrites its tar.

:meth:`StockadeSnapshot.restore` exports it as the tar the SDK's other sessions hydrate from;
:meth:`~stockade_agents.StockadeSandboxClient.fork` makes workspaces sharing its files (hard
links, under bubblewrap with layers only) for sessions of their own.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path
from typing import Literal

from agents.sandbox.errors import SnapshotPersistError, SnapshotRestoreError
from agents.sandbox.session.dependencies import Dependencies
from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec

from stockade.errors import UsageError
from stockade.layers import snapshots
from stockade.tree_copy import copy_tree
from stockade.trees import empty


class StockadeSnapshot(SnapshotBase):
    """A workspace snapshot in Stockade's store.

    Attributes:
        store: the store folder holding it; a client sets it to its own host's store,
            whatever a (deserialized) state says.
        taken: the Stockade snapshot's id (``snap-...``) once one was taken, else ``None``.
    """

    type: Literal["stockade"] = "stockade"
    store: str = ""
    taken: str | None = None

    def stockade(self) -> snapshots.Snapshot | None:
        """The Stockade snapshot this names, if it was taken and is still there."""
        if self.taken is None or not self.store:
            return None
        try:
            return snapshots.get(self.taken, store=self.store)
        except UsageError:
            return None

    def gone(self) -> SnapshotRestoreError:
        """The SDK's error for a snapshot never taken, or discarded since."""
        return SnapshotRestoreError(
            snapshot_id=self.id,
            path=Path(self.store or "<stockade>"),
            cause=FileNotFoundError(f"no Stockade snapshot {self.taken}"),
        )

    async def persist(self, data: io.IOBase, *, dependencies: Dependencies | None = None) -> None:
        # A Stockade session takes its snapshot from the folder (StockadeSandboxSession); a
        # tar from another backend's session has no folder to take it from.
        raise SnapshotPersistError(
            snapshot_id=self.id,
            path=Path(self.store or "<stockade>"),
            cause=TypeError(
                "a Stockade snapshot is taken by a Stockade session (StockadeSandboxClient); "
                "give other backends a LocalSnapshotSpec"
            ),
        )

    async def restore(self, *, dependencies: Dependencies | None = None) -> io.IOBase:
        """The snapshot as a tar stream (paths relative to the workspace)."""
        found = self.stockade()
        if found is None:
            raise self.gone()
        out = tempfile.TemporaryFile()  # noqa: SIM115 - handed to the caller, who closes it
        snapshots.export(found, out)
        out.seek(0)
        return out

    async def restorable(self, *, dependencies: Dependencies | None = None) -> bool:
        return self.stockade() is not None


class StockadeSnapshotSpec(SnapshotSpec):
    """Ask for a :class:`StockadeSnapshot` (``client.create(snapshot=StockadeSnapshotSpec())``);
    the client names the store."""

    type: Literal["stockade"] = "stockade"

    def build(self, snapshot_id: str) -> SnapshotBase:
        return StockadeSnapshot(id=snapshot_id)


def take(snapshot: StockadeSnapshot, root: str) -> StockadeSnapshot:
    """Snapshot ``root`` now; the SDK snapshot naming it (the one it named before is
    discarded)."""
    taken = snapshots.take(root, store=snapshot.store)
    previous = snapshot.stockade()
    if previous is not None:
        snapshots.discard(previous, store=snapshot.store)
    return snapshot.model_copy(update={"taken": taken.id})


def put_back(snapshot: StockadeSnapshot, root: str) -> None:
    """Make ``root`` hold what the snapshot holds: its entries removed, the snapshot's copied
    in. Run at a session's start, before any of its commands (see ``docs/integrations.md``
    for what a command of another session running in the same folder meanwhile could do).

    Raises:
        SnapshotRestoreError: the snapshot is gone.
    """
    found = snapshot.stockade()
    if found is None:
        raise snapshot.gone()
    clear(root)
    # Every name is new: a copy never writes through a name already there (O_EXCL); and
    # without recursion, as the snapshot's tree may be as deep as a command made it.
    copy_tree(found.folder, root, exist_ok=True)


def clear(root: str) -> None:
    """Remove every entry of ``root`` (never following a symlink, without recursion however
    deep a command made it), keeping the folder."""
    empty(root)


__all__ = ["StockadeSnapshot", "StockadeSnapshotSpec", "clear", "put_back", "take"]
