"""The sandbox session: every command of a ``SandboxAgent`` is a step of a Stockade run.

``exec`` hands the SDK's argv (``sh -lc SCRIPT`` from its shell tool) to the host, which
classifies it (a script by its parts), decides, confines and records it. File reads and
writes go through Stockade's file tools (:class:`stockade.workspace.files.Workspace`), never
by joining paths. What Stockade does not offer (a pty, exposed ports, running as another
user) is refused with an error that says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import tarfile
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Literal

from agents.sandbox.errors import (
    ExposedPortUnavailableError,
    SnapshotPersistError,
    SnapshotRestoreError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
)
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.session.pty_types import PtyExecUpdate
from agents.sandbox.session.sandbox_session_state import SandboxSessionState
from agents.sandbox.session.workspace_payloads import coerce_write_payload
from agents.sandbox.types import ExecResult, ExposedPortEndpoint, User
from agents.sandbox.util.tar_utils import UnsafeTarMemberError, safe_extract_tarfile
from pydantic import BaseModel, ConfigDict

from stockade import resolved
from stockade.errors import PolicyHeld, StockadeError, UsageError
from stockade.host import Host
from stockade.request.result import RunResult
from stockade.request.spec import ExecRequest
from stockade.run.doer import Admission
from stockade.run.executor import AbortToken
from stockade.workspace.files import Workspace

from . import results, snapshots

APPROVED_BY = "openai-agents (the run's tool approval)"
"""Who answered a held step the SDK's approval let run, or turned down (the store's
``answered_by``)."""
REJECTED = "rejected through the agent run's tool approval"
"""The reason of a held step's decline when the SDK's approval rejected its call."""


class HeldCall(BaseModel):
    """A step Stockade holds for the SDK's approval: the argv the tool call will run and
    where the store keeps it."""

    model_config = ConfigDict(frozen=True)

    argv: tuple[str, ...]
    run_id: str
    step: int
    call_id: str = ""


class StockadeSandboxSessionState(SandboxSessionState):
    """The session's state: the SDK's, plus the Stockade profile its commands run as and
    the steps held for the SDK's approval. The held steps travel in the SDK's ``RunState``,
    so an approval given after the runner stopped the session still finds its step."""

    type: Literal["stockade"] = "stockade"
    profile: str = "default"
    held: tuple[HeldCall, ...] = ()


_Parked = Admission | StockadeError


class StockadeSandboxSession(BaseSandboxSession):
    """A sandbox session whose commands run through a Stockade :class:`~stockade.host.Host`.

    Args:
        state: the SDK's session state (its manifest's ``root`` is the workspace).
        host: the run's host (:meth:`Host.for_run` of the client's): one session, one run.
    """

    state: StockadeSandboxSessionState

    def __init__(self, *, state: StockadeSandboxSessionState, host: Host) -> None:
        self.state = state
        self.host = host
        self._running = False
        self._files: Workspace | None = None
        # Steps admitted by the approval check, waiting for the tool call that runs them.
        self._parked: dict[tuple[str, ...], deque[_Parked]] = {}

    @property
    def root(self) -> str:
        """The workspace, as the host sees it (the manifest's root)."""
        return str(self.state.manifest.root)

    # --- lifecycle -------------------------------------------------------------------------

    async def _prepare_backend_workspace(self) -> None:
        await asyncio.to_thread(os.makedirs, self.root, 0o700, True)

    async def _after_start(self) -> None:
        profile = self.host.config.profile(self.state.profile)
        if self._files is not None:  # started again after a stop
            self._files.close()
        self._files = Workspace(self.root, quota_mb=profile.quota_mb)
        self._running = True

    async def _after_start_failed(self) -> None:
        self._running = False

    async def _after_shutdown(self) -> None:
        self._running = False
        await asyncio.to_thread(self._expire_parked)
        if self._files is not None:
            self._files.close()
            self._files = None
        await asyncio.to_thread(self.host.close)

    async def running(self) -> bool:
        return self._running

    def _expire_parked(self) -> None:
        """Close the record of every step admitted for a tool call that never came. Held
        steps stay in the store and in the state: the runner stops its session at every
        interruption, and the approval comes in the next run."""
        for parked in self._parked.values():
            for entry in parked:
                if isinstance(entry, Admission):
                    self.host.recording.error(
                        entry.spec,
                        code="cancelled",
                        message="admitted for a tool call the agent run never made",
                    )
        self._parked.clear()

    # --- what Stockade does not offer ------------------------------------------------------

    def supports_pty(self) -> bool:
        return False

    async def pty_exec_start(
        self,
        *command: str | Path,
        timeout: float | None = None,
        shell: bool | list[str] = True,
        user: str | User | None = None,
        tty: bool = False,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        raise NotImplementedError(
            "Stockade runs each command to its end with its output captured; it offers no "
            "pty and no interactive session (run the command with exec instead)"
        )

    async def _resolve_exposed_port(self, port: int) -> ExposedPortEndpoint:
        raise ExposedPortUnavailableError(
            port=port,
            exposed_ports=self.state.exposed_ports,
            reason="backend_unavailable",
            context={"backend": "stockade", "why": "Stockade exposes no ports"},
        )

    def _prepare_exec_command(
        self, *command: str | Path, shell: bool | list[str], user: str | User | None
    ) -> list[str]:
        if user is not None:
            raise ValueError(
                "Stockade runs commands as the user who runs it, confined; it does not switch "
                "users (no sudo): remove run_as / user"
            )
        return super()._prepare_exec_command(*command, shell=shell, user=None)

    # --- commands --------------------------------------------------------------------------

    def request(self, argv: Sequence[str], timeout: float | None) -> ExecRequest:
        """The Stockade request for ``argv``, run in the workspace as the session's profile."""
        own = self.host.config.profile(self.state.profile).workspace is not None
        return ExecRequest(
            tuple(argv),
            cwd=self.root,
            timeout=timeout if timeout else None,
            origin="api",
            profile=self.state.profile,
            workspace=None if own or self.state.profile != "default" else self.root,
        )

    async def admit(self, argv: Sequence[str], timeout: float | None, *, call_id: str = "") -> bool:
        """Admit ``argv`` now and keep the outcome for the call that runs it; whether it waits
        for a person (the SDK's approval then asks, and only an approved call runs it)."""
        request = self.request(argv, timeout)
        entry: _Parked
        try:
            entry = await asyncio.to_thread(self.host.admit, request)
        except PolicyHeld as held:
            run_id, step = str(held.details["run_id"]), int(str(held.details["step"]))
            call = HeldCall(argv=request.argv, run_id=run_id, step=step, call_id=call_id)
            self.state.held = (*self.state.held, call)
            return True
        except StockadeError as error:
            entry = error
        self._parked.setdefault(request.argv, deque()).append(entry)
        return False

    def decline_rejected(self, call_ids: set[str]) -> None:
        """Decline, in the store, the held steps of the tool calls ``call_ids``, which the
        SDK's approval rejected: each is final, a ``decline`` event."""
        for call in self.state.held:
            if call.call_id and call.call_id in call_ids:
                self._take_held(call.argv, call.call_id)
                with contextlib.suppress(UsageError):  # answered meanwhile (stockade decline)
                    self.host.answer(
                        call.run_id, call.step, approve=False, by=APPROVED_BY, reason=REJECTED
                    )

    def _take_held(self, argv: tuple[str, ...], call_id: str | None = None) -> HeldCall | None:
        for index, call in enumerate(self.state.held):
            if call.argv == argv and call_id in (None, call.call_id):
                self.state.held = self.state.held[:index] + self.state.held[index + 1 :]
                return call
        return None

    async def _exec_internal(
        self, *command: str | Path, timeout: float | None = None
    ) -> ExecResult:
        argv = tuple(str(part) for part in command)
        parked = self._parked.get(argv)
        entry: _Parked | HeldCall | None = parked.popleft() if parked else None
        if parked is not None and not parked:
            del self._parked[argv]
        if entry is None:
            entry = self._take_held(argv)
        if isinstance(entry, StockadeError):
            return results.refusal(entry)
        try:
            run = await _in_thread(partial(self._run, argv, timeout, entry))
        except StockadeError as error:
            return results.refusal(error)
        return results.of_run(run)

    def _run(
        self,
        argv: tuple[str, ...],
        timeout: float | None,
        entry: Admission | HeldCall | None,
        abort: AbortToken,
    ) -> RunResult:
        """One step on the host, on a worker thread: one hop, as ``Host.run`` costs."""
        host = self.host
        if entry is None:
            return host.run(self.request(argv, timeout), abort=abort)
        if isinstance(entry, HeldCall):
            # Only reached through the SDK's approval: a rejected call never runs its tool.
            # The state travels in the RunState: it names only a step held for this argv.
            found = host.store.get(entry.run_id, entry.step).spec
            if found.argv != argv or found.profile != self.state.profile:
                raise UsageError(
                    f"step {entry.step} of run {entry.run_id} is not this call's command",
                    hint="the session state names a held step of another command; it is "
                    "not approved",
                    details={"run_id": entry.run_id, "step": entry.step},
                )
            host.answer(entry.run_id, entry.step, approve=True, by=APPROVED_BY)
            return host.resume(entry.run_id, entry.step, abort=abort)
        carried = host.carry_out(host.prepare(entry), abort=abort)
        return host.finish(entry.spec, carried)  # result and taints: one batch

    # --- files -----------------------------------------------------------------------------

    def _relative(self, path: Path | str, *, for_write: bool = False) -> tuple[Path, str]:
        absolute = self.normalize_path(path, for_write=for_write)
        return absolute, os.path.relpath(absolute, self.root)

    def _workspace(self) -> Workspace:
        if self._files is None:
            raise WorkspaceArchiveReadError(
                path=Path(self.root), context={"reason": "the session is not started"}
            )
        return self._files

    async def read(self, path: Path, *, user: str | User | None = None) -> io.IOBase:
        if user is not None:
            raise ValueError("Stockade reads files as the user who runs it: remove user")
        absolute, relative = self._relative(path)
        files = self._workspace()
        breaker, profile = self.host.breaker, self.host.config.profile(self.state.profile)
        chunks: list[bytes] = []
        try:
            # Private data (the profile's globs, the sidecar's marks) is refused, as the MCP
            # file_read refuses it; what is read counts for the breaker as the MCP tool's does.
            # Each part is checked again as the file it opened, so a symlink swapped between
            # the check and the read cannot lead to a private file.
            def private(opened: str) -> None:
                breaker.file_read(self.root, opened, profile, granted=False)

            await asyncio.to_thread(private, relative)
            offset = 0
            while chunk := await asyncio.to_thread(
                files.file_bytes, relative, offset=offset, check=private
            ):
                chunks.append(chunk)
                offset += len(chunk)
            await asyncio.to_thread(breaker.file_tool, "read", self.root, relative, profile)
        except UsageError as error:
            if not os.path.lexists(absolute):
                raise WorkspaceReadNotFoundError(path=absolute, cause=error) from error
            raise WorkspaceArchiveReadError(
                path=absolute, context={"reason": str(error)}, cause=error
            ) from error
        except StockadeError as error:  # denied (private data), or the taint not recorded
            raise WorkspaceArchiveReadError(
                path=absolute, context={"reason": str(error)}, cause=error
            ) from error
        return io.BytesIO(b"".join(chunks))

    async def write(self, path: Path, data: io.IOBase, *, user: str | User | None = None) -> None:
        if user is not None:
            raise ValueError("Stockade writes files as the user who runs it: remove user")
        absolute, relative = self._relative(path, for_write=True)
        payload = coerce_write_payload(path=absolute, data=data)
        content = payload.stream.read()
        content = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        profile = self.host.config.profile(self.state.profile)
        try:
            written = await asyncio.to_thread(self._workspace().file_write, relative, content)
            await asyncio.to_thread(
                self.host.breaker.file_tool, "write", self.root, relative, profile, written=written
            )
        except StockadeError as error:
            raise WorkspaceArchiveWriteError(
                path=absolute, context={"reason": str(error)}, cause=error
            ) from error

    async def mkdir(
        self, path: Path | str, *, parents: bool = False, user: str | User | None = None
    ) -> None:
        # The SDK makes the root before every manifest; the session made it already. Any
        # other folder is a command like the agent's own (classified, decided, confined).
        if resolved.realpath(self.normalize_path(path, for_write=True)) == resolved.realpath(
            self.root
        ):
            return
        await super().mkdir(path, parents=parents, user=user)

    # --- snapshots: Stockade's own where the state asks for one -----------------------------

    async def _persist_snapshot(self) -> None:
        taken = self.state.snapshot
        if not isinstance(taken, snapshots.StockadeSnapshot):
            await super()._persist_snapshot()  # the SDK's: a tar of the workspace
            return
        try:
            self.state.snapshot = await asyncio.to_thread(snapshots.take, taken, self.root)
        except (OSError, StockadeError) as error:
            raise SnapshotPersistError(
                snapshot_id=taken.id, path=Path(self.root), cause=error
            ) from error

    def _should_compute_snapshot_fingerprint_on_persist(self) -> bool:
        # The SDK's fingerprint runs a helper program in the sandbox, a command of the run
        # the agent never asked for, to let a preserved workspace skip its restore; a
        # Stockade session's workspace is never preserved in that sense: it always restores.
        return False

    async def _restore_snapshot_into_workspace_on_resume(self) -> None:
        taken = self.state.snapshot
        if not isinstance(taken, snapshots.StockadeSnapshot):
            await super()._restore_snapshot_into_workspace_on_resume()
            return
        try:
            await asyncio.to_thread(snapshots.put_back, taken, self.root)
        except OSError as error:
            raise SnapshotRestoreError(
                snapshot_id=taken.id, path=Path(self.root), cause=error
            ) from error

    async def _clear_workspace_root_on_resume(self) -> None:
        # The SDK clears with `ls` and `rm -rf` run in the sandbox, which Stockade's policy
        # would hold or refuse; the host clears the session's own workspace itself.
        await asyncio.to_thread(snapshots.clear, self.root)

    # --- the workspace as a tar ------------------------------------------------------------

    async def persist_workspace(self) -> io.IOBase:
        # The SDK's portable form (a tar), for its other snapshot kinds and backends; a
        # StockadeSnapshot never calls this (_persist_snapshot takes it from the folder).
        root = self.root
        buffer = io.BytesIO()

        def archive() -> None:
            def keep(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
                if member.isfifo() or member.ischr() or member.isblk() or member.isdev():
                    return None
                return member

            with tarfile.open(fileobj=buffer, mode="w") as tar:
                tar.add(root, arcname=".", filter=keep)

        try:
            await asyncio.to_thread(archive)
        except (tarfile.TarError, OSError) as error:
            raise WorkspaceArchiveReadError(path=Path(root), cause=error) from error
        buffer.seek(0)
        return buffer

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        root = Path(self.root)

        def extract() -> None:
            root.mkdir(parents=True, exist_ok=True)
            with tarfile.open(fileobj=data, mode="r:*") as tar:
                safe_extract_tarfile(tar, root=root, allow_external_symlink_targets=False)

        try:
            await asyncio.to_thread(extract)
        except UnsafeTarMemberError as error:
            raise WorkspaceArchiveWriteError(
                path=root, context={"reason": error.reason, "member": error.member}, cause=error
            ) from error
        except (tarfile.TarError, OSError) as error:
            raise WorkspaceArchiveWriteError(path=root, cause=error) from error


async def _in_thread(call: Callable[[AbortToken], RunResult]) -> RunResult:
    """``call(abort)`` on a worker thread; cancelling the awaiting task kills the command
    (the abort token) and waits for its record to close."""
    abort = AbortToken()
    future = asyncio.get_running_loop().run_in_executor(None, call, abort)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        abort.abort()
        with contextlib.suppress(Exception):
            await future
        raise
    finally:
        if future.done():
            abort.close()
