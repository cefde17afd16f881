"""Doing: carrying out an admitted step, wherever it runs.

    AdmittedStep (+ the secret values beside it)
        -> prepare: the provider (``auto``'s pick on this machine), the egress proxy, the
           launch plan, a hidden program refused
        -> execute: in the held workspace, watched (quota, changes, the check after the run)
        -> Carried: the result (secrets scrubbed) and what the check did

A doer never decides and never records: what it is handed was decided, and what it gives back
(a :class:`~stockade.request.step.Carried`, or a :class:`~stockade.errors.StockadeError`) is
recorded by the side that decided. The host's own process, a warm server and a remote worker
all carry out steps through this class.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import attrs

from ..confine.hiding import hidden_arguments, refuse_hidden_program
from ..confine.select import Providers
from ..request.result import Refusal, RunResult
from ..request.spec import Egress, ExecSpec
from ..request.step import AdmittedStep, Agent, Carried
from .executor import AbortToken, Executor

if TYPE_CHECKING:
    from ..config.schema import Config
    from ..confine.provider import SandboxProvider
    from ..egress.command import CommandProxy
    from ..egress.proxy import Connection
    from ..plugin.manager import Registry
    from ..request.plan import LaunchPlan
    from ..request.result import Changes, ProcessOutcome
    from ..workspace.folders import Locks
    from .kept import Watches
    from .observe import Observation

OnOutput = Callable[[str, bytes], None]


@attrs.frozen
class Admission:
    """An admitted step and the credential values that go beside it (never inside it)."""

    step: AdmittedStep
    secrets: Mapping[str, str] = attrs.field(factory=dict, repr=False)

    @property
    def spec(self) -> ExecSpec:
        """The step's resolved command."""
        return self.step.spec


@attrs.define
class Prepared:
    """A step ready to start: its plan made, its proxy listening.

    Attributes:
        step: the admitted step.
        spec: the spec the plan was made from (``egress`` filled in for a proxied step).
        plan: how the executor must start it.
        provider: the provider that made the plan; it reads the outcome's facts and releases
            what the plan holds.
        secrets: the credential values in the plan's environment, scrubbed from the result.
        proxy: the egress proxy started for it, closed on release.
        refused: the connections its proxy refused, filled in while it runs.
    """

    step: AdmittedStep
    spec: ExecSpec
    plan: LaunchPlan
    provider: SandboxProvider
    secrets: tuple[str, ...] = ()
    proxy: CommandProxy | None = None
    refused: list[Refusal] = attrs.field(factory=list)

    def release(self) -> None:
        """Give back what the plan holds, then stop the step's egress proxy."""
        try:
            self.provider.release(self.plan)
        finally:
            if self.proxy is not None:
                self.proxy.close()


class Doer:
    """Carries out admitted steps on this machine.

    Args:
        config: the configuration (its executor, plugin settings, store folder).
        sandboxes: the sandbox provider classes installed here.
        executors: the executor classes installed here.
        run_id: the run whose steps it carries out (names its workspace locks).
    """

    def __init__(
        self,
        config: Config,
        *,
        sandboxes: Registry[SandboxProvider],
        executors: Registry[Executor],
        run_id: str,
    ) -> None:
        self.config = config
        self.executors = executors
        self.run_id = run_id
        self.providers = Providers(config, sandboxes)
        self._lock = threading.Lock()
        self._executor: Executor | None = None
        self._locks: Locks | None = None
        self.watches: Watches | None = None  # a warm server's kept watches (run.kept)
        self._stand_ins: dict[tuple[str, str], str] = {}

    def for_run(self, run_id: str) -> Doer:
        """A doer for another run on the same providers and executor (its own locks)."""
        doer = object.__new__(Doer)
        doer.config, doer.executors, doer.run_id = self.config, self.executors, run_id
        doer.providers = self.providers
        doer._lock, doer._locks, doer._stand_ins = self._lock, None, {}
        doer._executor = self.executor
        doer.watches = self.watches
        return doer

    @property
    def executor(self) -> Executor:
        """The configured executor, created on first use."""
        if self._executor is None:
            with self._lock:
                if self._executor is None:
                    cls = self.executors.get(self.config.executor)
                    settings = dict(self.config.plugins.settings.get(cls.PLUGIN_NAME, {}))
                    if self.config.output.spill_dir is not None:
                        settings.setdefault("spill_dir", self.config.output.spill_dir)
                    self._executor = cls(settings)
        return self._executor

    def hold(self, spec: ExecSpec, agent: Agent) -> contextlib.AbstractContextManager[None]:
        """An agent's workspace, held for this run while ``spec`` executes (one run at a
        time); a person's own profile in the current directory holds nothing.

        Raises:
            WorkspaceBusy: another run's command is executing there.
        """
        if not agent.own_workspace:
            return contextlib.nullcontext()
        if self._locks is None:
            from ..workspace.folders import Locks

            with self._lock:
                if self._locks is None:
                    self._locks = Locks(self.config, self.run_id)
        return self._locks.hold(spec.workspace)

    def prepare(
        self,
        step: AdmittedStep,
        secrets: Mapping[str, str],
        *,
        on_connection: Callable[[Connection], None] | None = None,
        check: Callable[[], str | None] | None = None,
    ) -> Prepared:
        """The provider, the egress proxy and the launch plan for ``step``. ``check`` is
        asked on each connection its proxy would let on, when it is made: a reason refuses
        it (the breaker's check where bytes leave, from the side that decides).

        Raises:
            SandboxUnavailable: no usable provider here can enforce its mode.
            SpawnFailed: its program is one the sandbox hides.
        """
        spec, proxy = step.spec, None
        refused: list[Refusal] = []
        if spec.layer_store is not None:  # a fork whose overlay is gone: mounted again
            from ..layers.snapshots import remount

            remount(spec.workspace, store=spec.layer_store)
        try:
            provider = self.providers.provider_for(spec)
            if step.egress is not None:
                proxy = self._proxy(step, refused, on_connection, secrets, check)
                egress = Egress(
                    proxy.hosts, socket=proxy.socket, port=proxy.port, ca_bundle=proxy.ca_bundle
                )
                spec = attrs.evolve(spec, egress=egress)
            # The provider sees the credentials as part of the environment it must pass on;
            # a credential the profile binds is a placeholder there (the proxy injects it).
            given = self.given(step, secrets)
            plan = provider.confine(attrs.evolve(spec, env={**spec.env, **given}))
            try:  # a program the sandbox hides would fail inside with a raw error
                refuse_hidden_program(provider, spec)
            except BaseException:
                provider.release(plan)
                raise
        except BaseException:
            if proxy is not None:
                proxy.close()
            raise
        return Prepared(step, spec, plan, provider, tuple(secrets.values()), proxy, refused)

    def given(self, step: AdmittedStep, secrets: Mapping[str, str]) -> dict[str, str]:
        """The credentials as the child gets them: the value, or for one its profile binds
        the run's placeholder (which the proxy turns into the value for the bound host)."""
        binds = step.agent.profile.credentials
        return {
            variable: self.stand_in(handle, value) if handle in binds else value
            for variable, handle in step.spec.credentials.items()
            if (value := secrets.get(variable)) is not None
        }

    def stand_in(self, handle: str, value: str) -> str:
        """The run's placeholder for ``handle`` (while its value stays the same)."""
        from ..egress.inject import placeholder

        with self._lock:
            return self._stand_ins.setdefault((handle, value), placeholder(value))

    def _proxy(
        self,
        step: AdmittedStep,
        refused: list[Refusal],
        on_connection: Callable[[Connection], None] | None,
        secrets: Mapping[str, str],
        check: Callable[[], str | None] | None = None,
    ) -> CommandProxy:
        """The egress proxy of a ``network`` step; each refusal lands in ``refused``.

        Raises:
            CredentialUnavailable: a bound credential's value cannot go in a header.
        """
        from ..egress.command import CommandProxy
        from ..egress.inject import Injection
        from ..errors import CredentialUnavailable

        assert step.egress is not None  # noqa: S101 - the caller checked

        def seen(connection: Connection) -> None:
            if not connection.allowed:
                refused.append(
                    Refusal(
                        connection.host,
                        connection.port,
                        method=connection.method,
                        reason=connection.reason,
                    )
                )
            if on_connection is not None:
                on_connection(connection)

        try:
            injections = [
                Injection.make(
                    bound.variable,
                    bound.handle,
                    bound.binding,
                    value := secrets[bound.variable],
                    self.stand_in(bound.handle, value),
                )
                for bound in step.egress.credentials
            ]
        except ValueError as error:
            raise CredentialUnavailable(
                str(error), hint="bind a real token, or pass it in the environment unbound"
            ) from None
        return CommandProxy(
            step.egress.hosts,
            step.egress.resolve,
            seen,
            injections=injections,
            upstream_ca=step.egress.upstream_ca,
            check=check,
        )

    def carry_out(
        self,
        prepared: Prepared,
        *,
        abort: AbortToken | None = None,
        on_output: OnOutput | None = None,
    ) -> Carried:
        """Execute a prepared step in its held workspace, release it, and give back what it
        came to.

        Raises:
            StockadeError: it could not be started, or its workspace is busy.
        """
        try:
            with self.hold(prepared.spec, prepared.step.agent):
                outcome, changes = self.execute(prepared, abort=abort, on_output=on_output)
        finally:
            prepared.release()
        return self.carried(prepared, outcome, changes)

    async def carry_out_async(
        self, prepared: Prepared, *, abort: AbortToken | None = None
    ) -> Carried:
        """:meth:`carry_out` for asyncio: cancelling the awaiting task kills the command."""
        try:
            with self.hold(prepared.spec, prepared.step.agent):
                watch = self.observe(prepared, abort)
                try:
                    outcome = await self.executor.run_async(prepared.plan, abort=watch.token)
                except BaseException:
                    watch.close()
                    raise
                outcome, changes = watch.finish(outcome)
        finally:
            prepared.release()
        return self.carried(prepared, outcome, changes)

    def execute(
        self,
        prepared: Prepared,
        *,
        abort: AbortToken | None = None,
        on_output: OnOutput | None = None,
    ) -> tuple[ProcessOutcome, Changes | None]:
        """The executor runs the plan while the workspace is watched: what it did, and what
        changed there."""
        watch = self.observe(prepared, abort)
        # (The provider releases the plan it made, by identity: the executor gets a copy.)
        plan = prepared.plan
        if on_output is not None:
            plan = attrs.evolve(plan, on_output=on_output)
        try:
            outcome = self.executor.run(plan, abort=watch.token)
        except BaseException:
            watch.close()
            raise
        return watch.finish(outcome)

    def observe(self, prepared: Prepared, abort: AbortToken | None) -> Observation:
        """The watches on a prepared step's workspace (:mod:`stockade.run.observe`)."""
        from ..config.schema import store_folder
        from .observe import Observation

        spec, agent = prepared.spec, prepared.step.agent
        return Observation(
            spec,
            abort,
            prepared.plan,
            quota_mb=agent.profile.quota_mb,
            track_changes=agent.own_workspace,
            watches=None if agent.own_workspace else self.watches,
            quarantine=os.path.join(store_folder(self.config), "quarantine", spec.action_id),
        )

    @staticmethod
    def carried(
        prepared: Prepared, outcome: ProcessOutcome, changes: Changes | None = None
    ) -> Carried:
        """The result of a step that ran, its output scrubbed of every secret."""
        from ..record.redact import redact_output

        step, spec, plan = prepared.step, prepared.spec, prepared.plan
        facts = prepared.provider.interpret(plan, outcome)
        guarded = outcome.guarded
        result = RunResult(
            spec.action_id,
            spec.argv,
            exit_code=outcome.exit_code,
            signal=outcome.signal,
            timed_out=outcome.timed_out,
            aborted=outcome.aborted,
            duration_ms=round(outcome.duration * 1000, 3),
            timeout_s=plan.timeout,
            stdout=redact_output(outcome.stdout, prepared.secrets),
            stderr=redact_output(outcome.stderr, prepared.secrets),
            sandbox=hidden_arguments(prepared.provider, spec, facts, outcome),
            classification=step.classification,
            decision=step.decision,
            limits=plan.limits,
            limit_hit=outcome.limit_hit,
            changes=changes,
            refused=tuple(prepared.refused),
            cwd=spec.cwd,
            quarantined=guarded.quarantined if guarded else (),
            restored=guarded.restored if guarded else (),
            landed=outcome.landed,
            conflicts=guarded.conflicts if guarded else (),
        )
        return Carried(result, guarded)

    def close(self) -> None:
        """Release the executor's helpers, then what the providers keep between plans."""
        if self._executor is not None:
            self._executor.close()
        self.providers.close()
