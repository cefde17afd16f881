"""The sandbox client: Stockade as the OpenAI Agents SDK's ``BaseSandboxClient``."""

from __future__ import annotations

import uuid
from typing import Literal, cast

from agents.sandbox.manifest import Manifest
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.session.manager import Instrumentation
from agents.sandbox.session.sandbox_client import BaseSandboxClient, BaseSandboxClientOptions
from agents.sandbox.session.sandbox_session import SandboxSession
from agents.sandbox.session.sandbox_session_state import SandboxSessionState
from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec, resolve_snapshot

from stockade import resolved
from stockade.config.schema import store_folder
from stockade.errors import UsageError
from stockade.host import Host
from stockade.layers import snapshots
from stockade.workspace.folders import workspace_of

from .session import StockadeSandboxSession, StockadeSandboxSessionState
from .snapshots import StockadeSnapshot

_DEFAULT_ROOT = cast("str", Manifest.model_fields["root"].default)


class StockadeSandboxClientOptions(BaseSandboxClientOptions):
    """Per-session options.

    Attributes:
        profile: the Stockade agent profile (``[agents.NAME]``) whose policy, workspace and
            limits every command of the session gets.
        exposed_ports: refused unless empty: Stockade exposes no ports.
    """

    type: Literal["stockade"] = "stockade"
    profile: str = "default"
    exposed_ports: tuple[int, ...] = ()


class StockadeSandboxClient(BaseSandboxClient[StockadeSandboxClientOptions | None]):
    """Creates sessions whose every command is a step of a Stockade run: classified,
    decided, confined by the host's sandbox (bubblewrap or Landlock) and recorded.

    Args:
        host: the configured host; each session runs on a run of its own
            (:meth:`Host.for_run`) sharing its plugins, providers and store.
        instrumentation: the SDK's session instrumentation.
    """

    backend_id = "stockade"
    supports_default_options = True

    def __init__(self, host: Host, *, instrumentation: Instrumentation | None = None) -> None:
        self.host = host
        self._instrumentation = (
            instrumentation if instrumentation is not None else Instrumentation()
        )

    def _root(self, profile: str, manifest: Manifest) -> str:
        """The session's workspace: the profile's own, else the manifest's root."""
        config = self.host.config
        own = workspace_of(config, config.profile(profile))
        if own is not None:
            if manifest.root not in (_DEFAULT_ROOT, own):
                raise UsageError(
                    f"profile {profile!r} has its workspace {own}; the manifest names "
                    f"{manifest.root}",
                    hint="leave the manifest's root unset, or set it to the profile's workspace",
                )
            return own
        if manifest.root != _DEFAULT_ROOT:
            return resolved.realpath(manifest.root)
        raise UsageError(
            "the default profile has no workspace: name a folder for the session",
            hint="set Manifest(root=FOLDER), or use a profile with a workspace "
            "(StockadeSandboxClientOptions(profile=NAME))",
        )

    async def create(
        self,
        *,
        snapshot: SnapshotSpec | SnapshotBase | None = None,
        manifest: Manifest | None = None,
        options: StockadeSandboxClientOptions | None = None,
    ) -> SandboxSession:
        options = options if options is not None else StockadeSandboxClientOptions()
        if options.exposed_ports:
            raise ValueError(
                f"Stockade exposes no ports (asked for {list(options.exposed_ports)}): a "
                "confined command's listener is not reachable from outside its sandbox"
            )
        manifest = manifest if manifest is not None else Manifest()
        _refuse_accounts(manifest)
        self._validate_manifest_for_create(manifest)
        root = self._root(options.profile, manifest)
        manifest = manifest.model_copy(update={"root": root}, deep=True)
        session_id = uuid.uuid4()
        state = StockadeSandboxSessionState(
            session_id=session_id,
            manifest=manifest,
            snapshot=resolve_snapshot(snapshot, str(session_id)),
            profile=options.profile,
        )
        return self._session(state)

    def _session(self, state: StockadeSandboxSessionState) -> SandboxSession:
        if isinstance(state.snapshot, StockadeSnapshot):
            # This host's store, whatever a deserialized state names.
            state.snapshot = self._own(state.snapshot)
        run = self.host.for_run(cwd=str(state.manifest.root))
        inner = StockadeSandboxSession(state=state, host=run)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    def _own(self, snapshot: StockadeSnapshot) -> StockadeSnapshot:
        return snapshot.model_copy(update={"store": store_folder(self.host.config)})

    def fork(self, snapshot: SnapshotBase, count: int) -> tuple[Manifest, ...]:
        """``count`` manifests, each rooted in a new workspace holding the snapshot's files
        (:func:`stockade.layers.snapshots.fork`: an overlay mount where the host may make
        one, as root, else hard links), for sessions of the default profile. In a fork of
        hard links, commands run under bubblewrap with layers only; elsewhere they are
        refused (``SandboxUnavailable``), since they would write the shared files in place.

        Raises:
            UsageError: ``snapshot`` is not a Stockade snapshot, was never taken, or is gone.
        """
        found = self._own(snapshot).stockade() if isinstance(snapshot, StockadeSnapshot) else None
        if found is None:
            raise UsageError(
                f"no Stockade snapshot behind SDK snapshot {snapshot.id}",
                hint="fork the snapshot of a stopped session made with StockadeSnapshotSpec()",
            )
        made = snapshots.fork(found, count, store=store_folder(self.host.config))
        return tuple(Manifest(root=folder) for folder in made)

    def discard(self, snapshot: SnapshotBase) -> None:
        """Remove the Stockade snapshot behind ``snapshot`` (if any) and every fork of it."""
        found = self._own(snapshot).stockade() if isinstance(snapshot, StockadeSnapshot) else None
        if found is not None:
            snapshots.discard(found, store=store_folder(self.host.config))

    async def delete(self, session: SandboxSession) -> SandboxSession:
        """Nothing of the host's to release beyond what stopping did: the workspace is the
        profile's or the caller's, and stays."""
        if not isinstance(session._inner, StockadeSandboxSession):
            raise TypeError("StockadeSandboxClient.delete expects a Stockade session")
        return session

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        if not isinstance(state, StockadeSandboxSessionState):
            raise TypeError("StockadeSandboxClient.resume expects a StockadeSandboxSessionState")
        _refuse_accounts(state.manifest)
        return self._session(state)

    def deserialize_session_state(self, payload: dict[str, object]) -> SandboxSessionState:
        return self._deserialize_session_state_payload(payload, StockadeSandboxSessionState)


def inner(session: BaseSandboxSession) -> StockadeSandboxSession | None:
    """The Stockade session behind the SDK's wrapper, if it is one."""
    found = getattr(session, "_inner", session)
    return found if isinstance(found, StockadeSandboxSession) else None


def _refuse_accounts(manifest: Manifest) -> None:
    if manifest.users or manifest.groups:
        raise ValueError(
            "Stockade runs commands as the user who runs it: a manifest's users and groups "
            "would be made on this machine, so they are refused"
        )


__all__ = ["StockadeSandboxClient", "StockadeSandboxClientOptions", "inner"]
