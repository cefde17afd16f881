"""A worker: a warm :class:`~stockade.run.doer.Doer` in a Ray actor, doing admitted steps.

The driver decides (:class:`~stockade_ray.pool.StockadePool`); a worker only does. It is
handed an :class:`~stockade.request.step.AdmittedStep` as its wire text
(:func:`stockade.request.wire.step_to_json`) with the credential values beside it, and
gives back a plain reply: the :class:`~stockade.request.step.Carried` as wire text, the
connections its egress proxy saw, and the files the step changed (size-capped), or the
structured error that stopped it. A worker never records: the driver appends what comes
back to its one chain.

Confinement is the node's own: the doer's providers pick, as ``auto`` does anywhere, the
strongest sandbox usable on this node (bubblewrap, else Landlock); where none is usable the
step fails closed with ``SandboxUnavailable``, its message naming the node.

The actor is async (one step at a time): a ``ray.cancel`` of a running step cancels the
awaiting task, and :meth:`~stockade.run.doer.Doer.carry_out_async` then kills the command's
whole group before the cancellation is given back. A killed actor takes its commands with
it: the executor's warden kills a command whose parent died.

Input files are written, and changed files read back, through the workspace file tools
(:class:`stockade.workspace.files.Workspace`): the same refusals (``..``, symlinks, ``.git``,
agent config, the quota) as for an agent's own file calls.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Mapping
from typing import Any

import attrs

from stockade.config.schema import Config, store_folder
from stockade.errors import SandboxUnavailable, StockadeError, UsageError
from stockade.layers import snapshots as layers
from stockade.plugin.manager import Hooks, get_plugin_manager
from stockade.request.step import AdmittedStep, Carried
from stockade.request.wire import plain, step_from_json, step_to_json
from stockade.run.doer import Doer
from stockade.trees import remove_tree

from .layered import start_pool
from .tripped import Tripped


@attrs.frozen
class Caps:
    """How much of the files a step changed comes back.

    Attributes:
        file_bytes: at most this much of each changed file (the rest is marked truncated).
        total_bytes: at most this much in all; changed files past it are only named.
    """

    file_bytes: int = 64 * 1024
    total_bytes: int = 1024 * 1024


class Worker:
    """One warm doer on one node (made a Ray actor by the pool).

    Args:
        config: the driver's configuration (its sandbox, executor and plugin settings).
        run_id: the driver's run: the steps it ships are that run's (names workspace locks).
        environ: entries laid over this process's environment for loading plugins
            (``STOCKADE_DISABLE_PLUGINS``, as the driver has it).
    """

    def __init__(
        self,
        config: Config,
        run_id: str,
        environ: Mapping[str, str],
        ledger: Any = None,  # noqa: ANN401 - the pool's ledger actor
    ) -> None:
        env = {**os.environ, **environ}
        hooks = Hooks(get_plugin_manager(config, environ=env))
        self.doer = Doer(
            config, sandboxes=hooks.sandboxes(), executors=hooks.executors(), run_id=run_id
        )
        self._runs: dict[str, Doer] = {run_id: self.doer}
        self._bases: dict[str, dict[str, str]] = {}  # a copied fork's manifest
        self._base_folders: dict[str, str] = {}  # a layered fork's snapshot folder
        self._manifests: dict[str, dict[str, str]] = {}
        self._refusal: tuple[str | None] | None = None  # why forks are copies here, once asked
        self.ledger = ledger
        self.place = _where()
        self.tripped = Tripped()  # the runs the driver said hold both (stockade_ray.tripped)
        self._live = start_pool(store_folder(config), run_id)  # held while this worker lives

    def _doer(self, run_id: str) -> Doer:
        """The doer of run ``run_id`` (an episode's steps hold their workspace for it)."""
        if run_id not in self._runs:
            self._runs[run_id] = self.doer.for_run(run_id)
        return self._runs[run_id]

    async def seed(
        self,
        workspace: str,
        snapshot: Any,  # noqa: ANN401 - a stockade_ray.forks.Snapshot (its data a reference)
        snapshots: Any,  # noqa: ANN401 - a stockade_ray.forks.Snapshots
    ) -> Any:  # noqa: ANN401 - a stockade_ray.forks.Forked
        """A workspace forked from ``snapshot`` for an episode: from the node's layers where
        its writing steps would write through them, else a copy into ``workspace``
        (:class:`~stockade_ray.forks.Forked` says which, and why)."""
        from .forks import manifest
        from .layered import layers_refusal

        store = store_folder(self.doer.config)
        if self._refusal is None:
            self._refusal = (layers_refusal(self.doer, store, "workspace-write"),)
        os.makedirs(os.path.dirname(workspace), mode=0o700, exist_ok=True)
        forked = snapshots.fork_into(
            snapshot, workspace, store=store, pool=self.doer.run_id, refusal=self._refusal[0]
        )
        if forked.base:
            self._base_folders[forked.workspace] = forked.base
        else:
            self._bases[forked.workspace] = manifest(forked.workspace)
        return forked

    def rehome(
        self,
        workspace: str,
        snapshot: Any,  # noqa: ANN401 - a stockade_ray.forks.Snapshot, or None
        base: str,
    ) -> dict[str, Any]:
        """An episode whose worker was lost comes here: ``kept`` when its workspace is on
        this node and holds anything (as its last finished step left it), else
        ``re-forked`` from ``snapshot`` into the same folder, else ``empty``; with the files
        it holds. ``base``: a layered fork's snapshot folder (what its changes are measured
        against)."""
        from .forks import copy_into, manifest, unpack

        with contextlib.suppress(SandboxUnavailable):  # then it is taken for an empty one
            layers.remount(workspace, store=store_folder(self.doer.config))  # its mount went
        # An empty folder is not taken for the episode's: the driver makes an own workspace
        # folder when it admits a step, on its node (on one disk with this one, it is here).
        found = os.path.isdir(workspace) and bool(os.listdir(workspace))
        if found:
            if base and os.path.isdir(base):
                self._base_folders[workspace] = base
            elif snapshot is not None:  # what it was forked from, for export(changes=True)
                import tempfile

                import ray

                with tempfile.TemporaryDirectory() as scratch:
                    unpack(ray.get(snapshot.data), os.path.join(scratch, "base"))
                    self._bases[workspace] = manifest(os.path.join(scratch, "base"))
            return {"workspace": "kept", "files": len(manifest(workspace))}
        if snapshot is None:
            os.makedirs(workspace, mode=0o700, exist_ok=True)
            return {"workspace": "empty", "files": 0}
        store = store_folder(self.doer.config)
        if base and os.path.isdir(base) and layers.is_fork(workspace, store=store):
            # A fork of this node's layers' snapshot: made again in place from it, no copy.
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.rmdir(workspace)  # an empty folder left where it was
                node = layers.get(os.path.basename(base), store=store)
                again = layers.fork_one(node, store=store, at=workspace)
            except (OSError, UsageError):
                pass  # copied below
            else:
                self._base_folders[workspace] = base
                return {"workspace": "re-forked", "files": len(manifest(again.folder))}
        os.makedirs(os.path.dirname(workspace), mode=0o700, exist_ok=True)
        forked = copy_into(snapshot, workspace, why="forked again on a replacement worker")
        self._bases[workspace] = manifest(workspace)
        return {"workspace": "re-forked", "files": forked.files}

    def _base(self, workspace: str) -> dict[str, str]:
        """What a forked workspace held when forked (by relative path, each file's sha256)."""
        from .forks import manifest

        if workspace in self._bases:
            return self._bases[workspace]
        folder = self._base_folders.get(workspace)
        if folder is None:
            return {}
        if folder not in self._manifests:  # a layers' snapshot never changes
            self._manifests[folder] = manifest(folder)
        return self._manifests[folder]

    def export(self, workspace: str, cap: int, changes: bool) -> Any:  # noqa: ANN401, FBT001
        """``workspace`` as a tar stream (:class:`~stockade_ray.forks.Export`); with
        ``changes``, only what changed since its fork; or the error, as a dict."""
        from .forks import export

        try:
            return export(workspace, cap=cap, base=self._base(workspace) if changes else None)
        except StockadeError as error:
            return {"error": error.to_dict()}

    def forget(self, run_id: str, workspace: str | None = None, *, remove: bool = False) -> None:
        """An episode ended: its doer released, its workspace removed when asked."""
        if run_id != self.doer.run_id:
            self._runs.pop(run_id, None)  # it shares this worker's executor: nothing to close
        if workspace is not None:
            self._bases.pop(workspace, None)
            self._base_folders.pop(workspace, None)
            store = store_folder(self.doer.config)
            if remove and layers.is_fork(workspace, store=store):
                with contextlib.suppress(UsageError, OSError):
                    layers.discard_fork(workspace, store=store)  # unmounted first
            elif remove:
                remove_tree(workspace)  # without recursion: a command made it, any depth

    async def trip(self, run_id: str, reason: str) -> bool:
        """The driver's word that run ``run_id`` holds both kinds (on the breaker's own
        concurrency group, so it lands while a step runs); ``True`` once kept."""
        self.tripped.trip(run_id, reason)
        return True

    def where(self) -> dict[str, str]:
        """This worker's node id, actor id, host name and process id."""
        return dict(self.place)

    async def carry(
        self,
        step_text: str,
        secrets: Mapping[str, str],
        files: Mapping[str, bytes],
        caps: Caps,
        moved: bool = False,  # noqa: FBT001, FBT002 - a Ray call's arguments are positional
    ) -> dict[str, Any]:
        """Carry out one admitted step: its input files written, then confined, executed and
        observed. ``moved``: its sticky workspace's worker was lost, and this is the first
        step since: run only in the folder found here holding something. The reply:
        ``carried`` (wire text), ``connections``, ``files``, ``left_out`` and ``where``; or
        ``error`` (a :meth:`StockadeError.to_dict`)."""
        seen: list[dict[str, Any]] = []
        reply: dict[str, Any] = {"where": self.place, "connections": seen}
        try:
            step = step_from_json(step_text, AdmittedStep)
            if moved:
                self._still_here(step.spec.workspace)
            if self.ledger is not None:  # before anything of the step touches its workspace
                await self.ledger.begin.remote(step.spec.action_id)
            os.makedirs(step.spec.workspace, mode=0o700, exist_ok=True)  # new to this node
            if files:
                _write_inputs(step, files)
            doer = self._doer(step.spec.run_id)
            prepared = doer.prepare(
                step,
                secrets,
                on_connection=lambda c: seen.append(attrs.asdict(c)),
                check=self.tripped.check(step),  # the breaker where bytes leave, told
            )
            carried = await doer.carry_out_async(prepared)
        except SandboxUnavailable as error:
            node = f"{self.place['hostname']} (node {self.place['node']})"
            named = SandboxUnavailable(
                f"on {node}: {error.message}",
                hint=error.hint,
                details={**error.details, "node": self.place["node"]},
            )
            return {**reply, "error": named.to_dict()}
        except StockadeError as error:
            return {**reply, "error": error.to_dict()}
        reply["carried"] = step_to_json(carried)
        reply["files"], reply["left_out"] = _changed_files(step, carried, caps)
        return reply

    def _still_here(self, workspace: str) -> None:
        """A sticky workspace whose worker was lost must be on this node, holding something
        (an empty folder is not taken for it: the driver makes an agent's own workspace
        empty on its node), or the step is refused rather than run in an empty folder.

        Raises:
            WorkerLost: it is not (``details["started"]`` is false: nothing of it ran).
        """
        from .errors import WorkerLost

        if os.path.isdir(workspace) and os.listdir(workspace):
            return
        raise WorkerLost(
            f"the workspace {workspace} was on a worker that was lost, and is not on the node "
            f"of its replacement ({self.place['hostname']}, node {self.place['node']}): its "
            "files went with the lost node; nothing of the step ran",
            hint="its next step starts in an empty folder there; keep workspaces that must "
            "survive a node on shared storage, or fork episodes from a snapshot",
            details={"started": False, "workspace": workspace, "node": self.place["node"]},
        )

    def close(self) -> None:
        """Release the executor's helpers, and the pool's layers' snapshots on this node
        that no kept fork uses."""
        from .layered import forget_pool

        try:
            forget_pool(store_folder(self.doer.config), self.doer.run_id)
        finally:
            if self._live >= 0:
                os.close(self._live)
                self._live = -1  # the pool's live lock: this worker is gone
            self.doer.close()  # the runs' doers share its executor and providers


def _where() -> dict[str, str]:
    import ray

    context = ray.get_runtime_context()
    actor = context.get_actor_id() or ""
    return {
        "node": context.get_node_id(),
        "actor": actor,
        "hostname": socket.gethostname(),
        "pid": str(os.getpid()),
    }


def _write_inputs(step: AdmittedStep, files: Mapping[str, bytes]) -> None:
    """The request's input files, written into the step's workspace by the file tool.

    Raises:
        UsageError: a path the file tool refuses (nothing of the step runs).
    """
    from stockade.workspace.files import Workspace

    workspace = step.spec.workspace
    with Workspace(workspace, quota_mb=step.agent.profile.quota_mb) as tool:
        for path, content in files.items():
            try:
                tool.file_write(path, content)
            except StockadeError as error:
                raise UsageError(
                    f"input file {path!r} was not written: {error.message}",
                    hint="name a relative path inside the workspace",
                    details={"path": path},
                ) from None


def _changed_files(
    step: AdmittedStep, carried: Carried, caps: Caps
) -> tuple[list[dict[str, Any]], list[str]]:
    """The files the step created or modified (when its workspace was watched), read by the
    file tool up to the caps; the paths past the total cap are only named."""
    from stockade.workspace.files import Workspace

    changes = carried.result.changes
    if changes is None:
        return [], []
    paths = [p for p in (*changes.created, *changes.modified) if not p.endswith("/")]
    back: list[dict[str, Any]] = []
    left_out: list[str] = []
    budget = caps.total_bytes
    with Workspace(step.spec.workspace) as tool:
        for path in sorted(paths):
            limit = min(caps.file_bytes, budget)
            if limit <= 0:
                left_out.append(path)
                continue
            try:
                read = tool.file_read(path, limit=limit)
            except StockadeError:
                left_out.append(path)  # gone again, or not a file the tool reads
                continue
            budget -= read.returned
            back.append(plain(read))
    return back, left_out
