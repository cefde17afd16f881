"""The host: sequences the stages of one command and nothing else.

    resolve -> classify -> enforce the class, check the roots -> decide (-> hold)
            -> credentials -> confine -> execute -> record

Each stage is a hook call (or a plain function of its inputs); the host owns no policy, no
confinement and no process handling of its own. Read :meth:`Host.run` top to bottom to see
the whole path of a command, and :meth:`Host.resume` for a held one a person approved.

One host is one *run*: its commands are the run's steps, numbered from 1, which is what a
profile's budget counts and what names a held step (``run_id``, ``step``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import pluggy

from .config.load import load_config
from .config.schema import Config
from .confine.hiding import hidden_arguments, refuse_hidden_program
from .confine.provider import SandboxProvider
from .errors import (
    CredentialUnavailable,
    PolicyDenied,
    PolicyHeld,
    RecorderFailed,
    SandboxUnavailable,
    StockadeError,
    UsageError,
)
from .plugin.manager import Hooks, get_plugin_manager
from .policy.enforce import enforce_class
from .policy.resolve import resolve
from .run.executor import AbortToken, Executor

if TYPE_CHECKING:
    from .egress.proxy import CommandProxy
    from .record import events
    from .record.store import HeldStep, Store
    from .run.observe import Observation
    from .run.tasks import TaskInfo, TaskOutput, Tasks
    from .workspace.folders import Home, Locks

from .request.plan import LaunchPlan, Probe
from .request.result import (
    Changes,
    CollectedOutput,
    PendingApproval,
    ProcessOutcome,
    Refusal,
    RunResult,
)
from .request.spec import Egress, ExecRequest, ExecSpec, new_run_id
from .request.verdict import Classification, Decision

UNCLASSIFIED = Classification(
    "writes", ("no classifier is installed, so every command counts as writes",), by=("host",)
)


@attrs.frozen
class Admitted:
    """A command that passed every stage before execution.

    Attributes:
        spec: the resolved command.
        classification: what it may affect.
        decision: why it may run.
        plan: how the executor must start it.
        secrets: credential values injected into the plan, redacted from the result.
        provider: the sandbox provider that made the plan; it reads the outcome's facts and
            releases what the plan holds.
        egress: the egress proxy started for a ``network`` command, closed on release.
        refused: the connections its proxy refused, filled in while it runs.
    """

    spec: ExecSpec
    classification: Classification
    decision: Decision
    plan: LaunchPlan
    secrets: tuple[str, ...]
    provider: SandboxProvider
    egress: CommandProxy | None = None
    refused: list[Refusal] = attrs.field(factory=list)

    def release(self) -> None:
        """Give back what the plan holds, then stop the command's egress proxy."""
        try:
            self.provider.release(self.plan)
        finally:
            if self.egress is not None:
                self.egress.close()


class Host:
    """Runs commands through the plugins that configuration selects.

    Args:
        config: the configuration (embedded defaults when omitted).
        environ: the ambient environment children are filtered from (``os.environ``).
        plugins: extra plugin objects, registered after the installed ones.
        load_entry_points: load installed plugins from the ``stockade`` entry points.

    Attributes:
        run_id: the run this host's commands are steps of.
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        plugins: Sequence[object] = (),
        load_entry_points: bool = True,
    ) -> None:
        self.config = config if config is not None else Config()
        self.environ: Mapping[str, str] = dict(os.environ if environ is None else environ)
        self.pm: pluggy.PluginManager = get_plugin_manager(
            self.config,
            environ=self.environ,
            plugins=plugins,
            load_entry_points=load_entry_points,
        )
        self.hooks = Hooks(self.pm)
        self.executors = self.hooks.executors()
        self.sandboxes = self.hooks.sandboxes()
        self.rules = self.hooks.classifier_rules()
        self.run_id = new_run_id()
        self._steps = 0
        self._started: float | None = None
        self._store: Store | None = None
        self._locks: Locks | None = None
        self._home: Home | None = None
        self._tasks: Tasks | None = None
        self._lock = threading.Lock()
        self._executor: Executor | None = None
        self._providers: dict[str, SandboxProvider] = {}
        self._probes: dict[str, Probe] = {}
        # Events are built only for recorders; without one, nothing is built or imported.
        self._recording = self.hooks.has_recorder()

    @classmethod
    def from_environment(
        cls,
        config_path: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        plugins: Sequence[object] = (),
    ) -> Host:
        """A host configured from ``config_path``, ``STOCKADE_CONFIG`` or the XDG config."""
        env = dict(os.environ if environ is None else environ)
        return cls(load_config(config_path, environ=env), environ=env, plugins=plugins)

    # --- the path of one command ---------------------------------------------------------

    def run(self, request: ExecRequest, *, abort: AbortToken | None = None) -> RunResult:
        """Run one command through every stage and return its structured result.

        Raises:
            StockadeError: a stage refused the command (it did not run), or it could not be
                started; see :mod:`stockade.errors` for the codes.
        """
        return self._carry(self.admit(request), abort)

    def _carry(
        self,
        admitted: Admitted,
        abort: AbortToken | None,
        on_output: Callable[[str, bytes], None] | None = None,
    ) -> RunResult:
        """An admitted command, executed in its held workspace, then recorded."""
        try:
            with self.hold(admitted.spec):
                outcome, changes = self._execute(admitted, abort, on_output)
        except StockadeError as error:
            self._record_error(admitted.spec, error)
            raise
        finally:
            admitted.release()
        return self._finish(admitted, outcome, changes)

    # --- background tasks ----------------------------------------------------------------

    def start(self, request: ExecRequest, *, owner: str) -> TaskInfo:
        """Admit ``request`` now, then run it in the background as a task of ``owner``.

        Raises:
            StockadeError: as :meth:`run`, before anything runs (denied, held, ...).
            TooManyTasks: ``owner`` has as many tasks running as it may.
        """
        tasks = self.tasks
        admitted = self.admit(request)

        def runner(abort: AbortToken, on_output: Callable[[str, bytes], None]) -> RunResult:
            return self._carry(admitted, abort, on_output)

        try:
            return tasks.start(owner, request.argv, runner, admitted.secrets)
        except BaseException as error:
            if isinstance(error, StockadeError):
                self._record_error(admitted.spec, error)
            admitted.release()
            raise

    def read_output(self, task_id: str, *, owner: str) -> TaskOutput:
        """What task ``task_id`` printed since the previous read (see :mod:`stockade.run.tasks`)."""
        return self.tasks.read(owner, task_id)

    def kill(self, task_id: str, *, owner: str) -> TaskInfo:
        """Kill task ``task_id`` and everything it started; returns once it has ended."""
        return self.tasks.kill(owner, task_id)

    def list_tasks(self, *, owner: str) -> list[TaskInfo]:
        """The tasks of ``owner``, oldest first."""
        return self.tasks.list(owner)

    def on_task_done(self, callback: Callable[[TaskInfo], None]) -> None:
        """Call ``callback(info)`` when any task ends, from that task's thread."""
        self.tasks.on_done(callback)

    @property
    def tasks(self) -> Tasks:
        """The host's background tasks (made on first use)."""
        if self._tasks is None:
            from .run.tasks import Tasks

            with self._lock:
                if self._tasks is None:
                    self._tasks = Tasks()
        return self._tasks

    async def run_async(
        self, request: ExecRequest, *, abort: AbortToken | None = None
    ) -> RunResult:
        """:meth:`run` for asyncio: cancelling the awaiting task kills the command."""
        import asyncio  # not at the top: asyncio costs more to import than a CLI run

        admitted = await asyncio.to_thread(self.admit, request)
        try:
            with self.hold(admitted.spec):
                watch = self._observe(admitted, abort)
                try:
                    outcome = await self.executor.run_async(admitted.plan, abort=watch.token)
                except BaseException:
                    watch.close()
                    raise
                outcome, changes = watch.finish(outcome)
        except StockadeError as error:
            self._record_error(admitted.spec, error)
            raise
        except asyncio.CancelledError:
            # The executor killed the command; the record must still close.
            self._record_error(
                admitted.spec,
                code="cancelled",
                message="the awaiting task was cancelled, so the command was killed",
            )
            raise
        finally:
            admitted.release()
        return self._finish(admitted, outcome, changes)

    def admit(self, request: ExecRequest) -> Admitted:
        """Every stage before execution: resolve, classify, decide, credentials, confine.

        Raises:
            UnsafeRoot: a writable root it would get is a home, a system folder, the
                store, ... (:mod:`stockade.confine.roots`); checked once its mode is known, before
                the decision, and recorded.
            PolicyHeld: the command waits for a person; it is kept as this run's step.
        """
        step, elapsed = self._next_step()
        spec = resolve(
            request,
            self.config,
            self.environ,
            run_id=self.run_id,
            step=step,
            run_elapsed=elapsed,
            home=self._home_for(request.profile),
        )
        # Secrets are resolved before anything is recorded, so that an argv carrying one is
        # refused before it could be written down; they go to the child at spawn.
        try:
            secrets = self.secrets(spec)
        except CredentialUnavailable as error:
            # No value was found, so none can be in argv: the refusal is recorded.
            if self._recording:
                from .record import events

                self._record(events.ActionEvent.of(spec))
                self._record_error(spec, error)
            raise
        if self._recording:
            from .record import events

            self._record(events.ActionEvent.of(spec))
        classification = self.classify(spec)
        spec = enforce_class(spec, classification)
        self._check_roots(spec)
        if request.gate is not None:
            self._gate(spec, classification, request.gate)
        decision = self.decide(spec, classification)
        return self._prepare(spec, classification, decision, secrets)

    def _check_roots(self, spec: ExecSpec) -> None:
        """Refuse, recorded, a command whose writable roots break :mod:`stockade.confine.roots`."""
        from .confine.roots import check_spec
        from .errors import UnsafeRoot

        try:
            check_spec(spec, self.config, self.environ)
        except UnsafeRoot as error:
            self._record_error(spec, error)
            raise

    def _gate(self, spec: ExecSpec, classification: Classification, gate: Decision) -> None:
        """A caller's gate in front of the policy: recorded; a ``deny`` refuses here."""
        if self._recording:
            from .record import events

            self._record(events.PermissionEvent(spec.action_id, classification, decision=gate))
        if gate.verdict == "deny":
            raise PolicyDenied(
                f"refused by {gate.by or 'a gate'}: {gate.reason}",
                details={"action_id": spec.action_id, "kind": classification.kind, "gate": True},
            )

    def _prepare(
        self,
        spec: ExecSpec,
        classification: Classification,
        decision: Decision,
        secrets: dict[str, str] | None = None,
    ) -> Admitted:
        """Credentials, the egress proxy and confinement for a command that may run."""
        egress = None
        refused: list[Refusal] = []
        try:
            if secrets is None:
                secrets = self.secrets(spec)
            provider = self.provider_for(spec)
            egress = self._egress(spec, classification, refused)
            if egress is not None:
                spec = attrs.evolve(
                    spec, egress=Egress(egress.hosts, socket=egress.socket, port=egress.port)
                )
            # The provider sees the credentials as part of the environment it must pass on.
            plan = provider.confine(attrs.evolve(spec, env={**spec.env, **secrets}))
            try:  # a program the sandbox hides would fail inside with a raw error
                refuse_hidden_program(provider, spec)
            except BaseException:
                provider.release(plan)
                raise
        except StockadeError as error:
            if egress is not None:
                egress.close()
            self._record_error(spec, error)  # admitted, yet it cannot run: close the record
            raise
        except BaseException:
            if egress is not None:
                egress.close()
            raise
        return Admitted(
            spec, classification, decision, plan, tuple(secrets.values()), provider, egress, refused
        )

    def _egress(
        self, spec: ExecSpec, classification: Classification, refused: list[Refusal]
    ) -> CommandProxy | None:
        """The proxy for a ``network`` command whose profile names hosts; else no network.
        Each connection it refuses is added to ``refused`` as well as recorded."""
        if classification.kind != "network" or spec.mode == "danger-full-access":
            return None
        hosts = self.config.profile(spec.profile).hosts
        if not hosts:
            return None
        action_id = spec.action_id

        def record(connection: Any) -> None:  # noqa: ANN401 - an egress.Connection
            if not connection.allowed:
                refused.append(
                    Refusal(
                        connection.host,
                        connection.port,
                        method=connection.method,
                        reason=connection.reason,
                    )
                )
            if not self._recording:
                return
            from .record import events

            try:
                self.hooks.record(events.ConnectionEvent(action_id, **attrs.asdict(connection)))
            except Exception as error:  # noqa: BLE001 - the proxy's thread must go on
                import sys

                print(f"stockade: warning: connection not recorded: {error}", file=sys.stderr)

        from .egress.proxy import CommandProxy

        return CommandProxy(hosts, self.config.network.resolve, record)

    def classify(self, spec: ExecSpec) -> Classification:
        """Every classifier votes; the most severe kind wins and all reasons are kept."""
        votes = self.hooks.classify(spec, self.rules)
        if not votes:
            return UNCLASSIFIED
        worst = max(votes, key=lambda vote: vote.severity)
        return Classification(
            worst.kind,
            tuple(reason for vote in votes for reason in vote.reasons),
            by=tuple(name for vote in votes for name in vote.by),
            programs=tuple(dict.fromkeys(p for vote in votes for p in vote.programs)),
        )

    def decide(self, spec: ExecSpec, classification: Classification) -> Decision:
        """The policy's decision, a person's answer when it asks; recorded, then enforced.

        Raises:
            PolicyDenied: the command is denied.
            PolicyHeld: the command needs a person and none answered; it is kept in the
                store as step ``spec.step`` of run ``spec.run_id`` for ``stockade approve``.
        """
        profile = self.config.profile(spec.profile)
        decision = self.hooks.decide(spec, classification, profile) or Decision(
            "deny", "no policy plugin is loaded (the built-in one is blocked)", by="host"
        )
        if spec.grant_writable and decision.verdict == "allow":
            # A widening is never the policy's to give: a person grants it, or nobody.
            decision = Decision(
                "ask",
                f"it asks for a one-shot grant: {', '.join(spec.grant_writable)} writable",
                by=decision.by,
            )
        if decision.verdict == "ask":
            if spec.preapproved and spec.origin != "mcp":
                decision = Decision(
                    "allow", f"approved in advance: {decision.reason}", by="preapproved"
                )
            else:
                pending = PendingApproval(spec, classification, decision)
                decision = self.hooks.ask(pending) or decision
        if self._recording:
            from .record import events

            self._record(events.PermissionEvent(spec.action_id, classification, decision=decision))
            if spec.grant_writable and decision.verdict == "allow":
                self._record(self._grant(spec, decision))
        if decision.verdict == "deny":
            raise PolicyDenied(
                f"denied by {decision.by or 'policy'}: {decision.reason}",
                details={"action_id": spec.action_id, "kind": classification.kind},
            )
        if decision.verdict == "ask":
            self.store.hold(PendingApproval(spec, classification, decision))
            run, step = spec.run_id, spec.step
            raise PolicyHeld(
                f"held for a person's approval as step {step} of run {run}: {decision.reason}",
                hint=f"a person runs it with `stockade approve {run} {step}` or refuses it "
                f"with `stockade decline {run} {step}`; `stockade pending` lists what waits",
                details={
                    "action_id": spec.action_id,
                    "kind": classification.kind,
                    "run_id": run,
                    "step": step,
                    "argv": list(spec.argv),
                },
            )
        return decision

    # --- held steps ----------------------------------------------------------------------

    @property
    def store(self) -> Store:
        """The embedded store (opened on first use)."""
        if self._store is None:
            from .record.store import open_store

            with self._lock:
                if self._store is None:
                    self._store = open_store(self.config)
        return self._store

    def answer(
        self, run_id: str, step: int, *, approve: bool, by: str, reason: str = "declined"
    ) -> HeldStep:
        """Record a person's answer to a held step (it runs on :meth:`resume`).

        A decline is final at once and is a ``decline`` event in the record (``reason``
        says how: ``declined``, ``cancelled``, ``expired``...); an approval is recorded as
        the ``permission`` event of :meth:`resume`.

        Raises:
            UsageError: no such step, or it was already answered.
            RecorderFailed: declined, but a recorder could not record it (it still never runs).
        """
        held = self.store.answer(run_id, step, approve=approve, by=by)
        if not approve and self._recording:
            from .record import events

            self._record(events.DeclineEvent(held.spec.action_id, by=by, reason=reason))
        return held

    def resume(
        self,
        run_id: str,
        step: int,
        *,
        abort: AbortToken | None = None,
        on_output: Callable[[str, bytes], None] | None = None,
    ) -> RunResult:
        """Run a held step a person approved, exactly as it was shown; once.

        A step that already ran gives back the result it had. ``on_output`` sees its output
        as it comes (a background task's reads).

        Raises:
            PolicyHeld: nobody has answered yet.
            PolicyDenied: a person declined it.
            UsageError: no such step, or another process is running it now.
        """
        from .request.wire import from_json, to_json

        held = self.store.get(run_id, step)
        spec, classification, shown = held.spec, held.classification, held.decision
        names = {"run_id": run_id, "step": step}
        if held.state == "held":
            raise PolicyHeld(
                f"step {step} of run {run_id} still waits for a person",
                hint=f"`stockade approve {run_id} {step}`",
                details=names,
            )
        if held.state == "declined":
            raise PolicyDenied(f"declined by {held.answered_by}", details=names)
        if held.state == "done" and held.outcome is not None:
            return from_json(held.outcome, RunResult)
        # The workspace first: while another run holds it, the step stays approved.
        with self.hold(spec):
            if held.state == "failed" or not self.store.claim(run_id, step):
                raise UsageError(
                    f"step {step} of run {run_id} is {self.store.get(run_id, step).state}: it is "
                    "running, or ran, in another process",
                    details=names,
                )
            spec = self._rehome(spec)
            decision = Decision("allow", f"approved: {shown.reason}", by=held.answered_by or "")
            try:
                self._check_roots(spec)  # homes and the store may have moved since it was held
                if self._recording:
                    from .record import events

                    self._record(
                        events.PermissionEvent(spec.action_id, classification, decision=decision)
                    )
                    if spec.grant_writable:
                        self._record(self._grant(spec, decision))
                admitted = self._prepare(spec, classification, decision)
                try:
                    outcome, changes = self._execute(admitted, abort, on_output)
                finally:
                    admitted.release()
                result = self._finish(admitted, outcome, changes)
            except StockadeError as error:
                self.store.finish(run_id, step, outcome=to_json(error.to_dict()), failed=True)
                raise
            self.store.finish(run_id, step, outcome=to_json(result))
        return result

    def _execute(
        self,
        admitted: Admitted,
        abort: AbortToken | None,
        on_output: Callable[[str, bytes], None] | None = None,
    ) -> tuple[ProcessOutcome, Changes | None]:
        """The executor runs the plan while the workspace is watched: what it did, and
        what changed there."""
        watch = self._observe(admitted, abort)
        # (The provider releases the plan it made, by identity: the executor gets a copy.)
        plan = admitted.plan
        if on_output is not None:
            plan = attrs.evolve(plan, on_output=on_output)
        try:
            outcome = self.executor.run(plan, abort=watch.token)
        except BaseException:
            watch.close()
            raise
        return watch.finish(outcome)

    def _observe(self, admitted: Admitted, abort: AbortToken | None) -> Observation:
        from .run.observe import Observation

        return Observation(admitted.spec, self.config, abort, admitted.plan)

    @staticmethod
    def _grant(spec: ExecSpec, decision: Decision) -> events.GrantEvent:
        from .record import events

        return events.GrantEvent(spec.action_id, writable=spec.grant_writable, by=decision.by)

    def hold(self, spec: ExecSpec) -> contextlib.AbstractContextManager[None]:
        """An agent's workspace, held for this run while ``spec`` executes (one run at a
        time); a person's own ``default`` profile in the current directory holds nothing.

        Raises:
            WorkspaceBusy: another run's command is executing there.
        """
        from .workspace.folders import Locks, has_own

        if not has_own(self.config, spec.profile):
            return contextlib.nullcontext()
        if self._locks is None:
            self._locks = Locks(self.config, self.run_id)
        return self._locks.hold(spec.workspace)

    def _rehome(self, spec: ExecSpec) -> ExecSpec:
        """A held step runs in the home of the run that releases it: the home it was
        shown with went away with its own run."""
        home = self._home_for(spec.profile)
        if spec.home is None or home is None:
            return spec
        env = dict(spec.env)
        if env.get("HOME") == spec.home:
            env["HOME"] = home
        return attrs.evolve(spec, home=home, env=env)

    def _home_for(self, profile: str) -> str | None:
        """This run's home, made on an agent's first command; a person's profile has none."""
        from .workspace.folders import Home, has_own

        if not has_own(self.config, profile):
            return None
        with self._lock:
            if self._home is None:
                self._home = Home(self.config, self.run_id)
            return self._home.path

    def _next_step(self) -> tuple[int, float]:
        with self._lock:
            now = time.monotonic()
            if self._started is None:
                self._started = now
            self._steps += 1
            return self._steps, now - self._started

    def credentials(self, spec: ExecSpec) -> dict[str, str]:
        """Each requested handle resolved to its value by a broker, at spawn time only.

        Raises:
            CredentialUnavailable: no broker resolved a handle.
        """
        values = {}
        for variable, handle in spec.credentials.items():
            value = self.hooks.resolve_credential(handle, spec)
            if value is None:
                raise CredentialUnavailable(
                    f"no credential broker resolved {handle!r} (for {variable})",
                    hint="install or configure a credential broker plugin that knows it",
                )
            values[variable] = value
        return values

    def secrets(self, spec: ExecSpec) -> dict[str, str]:
        """:meth:`credentials`, refusing a command whose argv carries one of the values.

        Raises:
            CredentialUnavailable: no broker resolved a handle.
            UsageError: an argument holds a secret (or an encoding of it).
        """
        if not spec.credentials:
            return {}
        values = self.credentials(spec)
        from .record.redact import refuse_in_argv

        refuse_in_argv(spec.argv, values.values())
        return values

    def confine(self, spec: ExecSpec) -> LaunchPlan:
        """The selected sandbox provider's launch plan for ``spec``.

        Raises:
            SandboxUnavailable: no usable provider can enforce the mode; never runs unconfined.
        """
        return self.provider_for(spec).confine(spec)

    # --- selection -----------------------------------------------------------------------

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

    def probe(self, cls: type[SandboxProvider]) -> Probe:
        """``cls.probe()``, asked once per host."""
        name = cls.PLUGIN_NAME
        if name not in self._probes:
            try:
                self._probes[name] = cls.probe()
            except Exception as error:  # noqa: BLE001 - a broken probe means unusable, not a crash
                self._probes[name] = Probe(False, f"probe failed: {error}")
        return self._probes[name]

    def provider_for(self, spec: ExecSpec) -> SandboxProvider:
        """The provider that confines ``spec``: the named one, or ``auto``'s pick."""
        name = spec.sandbox
        if name == "auto":
            name = "none" if spec.mode == "danger-full-access" else self._pick(spec)
        cls = self.sandboxes.get(name)
        if spec.mode not in cls.MODES:
            raise SandboxUnavailable(
                f"sandbox {name!r} cannot enforce mode {spec.mode} "
                f"(it supports {', '.join(sorted(cls.MODES))})",
                hint="pick another --sandbox or --mode",
            )
        probe = self.probe(cls)
        if not probe.usable:
            raise SandboxUnavailable(
                f"sandbox {name!r} is not usable here: {probe.detail}",
                hint="run `stockade doctor` to see what this machine lacks",
            )
        with self._lock:
            provider = self._providers.get(name)
            if provider is None:
                provider = cls(self.config.plugins.settings.get(name))
                self._providers[name] = provider
        return provider

    def _pick(self, spec: ExecSpec) -> str:
        why = []
        candidates = sorted(self.sandboxes.classes(), key=lambda c: -c.PRIORITY)
        for cls in candidates:
            if cls.PLUGIN_NAME == "none" or spec.mode not in cls.MODES:
                continue
            probe = self.probe(cls)
            if probe.usable:
                return cls.PLUGIN_NAME
            why.append(f"{cls.PLUGIN_NAME}: {probe.detail}")
        found = "; ".join(why) if why else "no sandbox provider plugin is installed"
        raise SandboxUnavailable(
            f"cannot confine mode {spec.mode}: {found}",
            hint="install stockade-bubblewrap or stockade-landlock, or pass "
            "--mode danger-full-access to run unconfined on purpose",
            details={"mode": spec.mode, "tried": why},
        )

    # --- recording -----------------------------------------------------------------------

    def _finish(
        self, admitted: Admitted, outcome: ProcessOutcome, changes: Changes | None = None
    ) -> RunResult:
        spec, plan = admitted.spec, admitted.plan
        result = RunResult(
            spec.action_id,
            spec.argv,
            exit_code=outcome.exit_code,
            signal=outcome.signal,
            timed_out=outcome.timed_out,
            aborted=outcome.aborted,
            duration_ms=round(outcome.duration * 1000, 3),
            timeout_s=plan.timeout,
            stdout=_redact(outcome.stdout, admitted.secrets),
            stderr=_redact(outcome.stderr, admitted.secrets),
            sandbox=hidden_arguments(
                admitted.provider, spec, admitted.provider.interpret(plan, outcome), outcome
            ),
            classification=admitted.classification,
            decision=admitted.decision,
            limits=plan.limits,
            limit_hit=outcome.limit_hit,
            changes=changes,
            refused=tuple(admitted.refused),
            cwd=spec.cwd,
            quarantined=outcome.guarded.quarantined if outcome.guarded else (),
            restored=outcome.guarded.restored if outcome.guarded else (),
        )
        if not self._recording:
            return result
        from .record import events

        try:
            if outcome.guarded is not None:
                self.hooks.record(events.QuarantineEvent.of(spec.action_id, outcome.guarded))
            self.hooks.record(events.ResultEvent(spec.action_id, result))
        except Exception as error:
            raise RecorderFailed(
                f"the command ran, but a recorder failed to record its result: {error}",
                hint="the result is attached to this error; check the recorder's storage",
                result=result,
            ) from error
        return result

    def _record(self, event: events.Event) -> None:
        try:
            self.hooks.record(event)
        except Exception as error:
            raise RecorderFailed(
                f"a recorder failed, so the command was not run: {error}",
                hint="check the recorder's storage, or block the recorder plugin",
            ) from error

    def _record_error(
        self,
        spec: ExecSpec,
        error: StockadeError | None = None,
        *,
        code: str = "",
        message: str = "",
    ) -> None:
        if self._recording:
            from .record import events

            if error is not None:
                code, message = error.code, error.message
            self._record(events.ErrorEvent(spec.action_id, code, message=message))

    def close(self) -> None:
        """Kill every background task; release the executor's helpers and the store;
        remove the run's home."""
        if self._tasks is not None:
            self._tasks.close()
        if self._executor is not None:
            self._executor.close()
        if self._home is not None:
            self._home.remove()
            self._home = None
        if self._store is not None:
            self._store.close()
            self._store = None
        recorder = self.pm.get_plugin("stockade.builtin.recorder")
        if recorder is not None:
            recorder.close()

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _redact(output: CollectedOutput, secrets: tuple[str, ...]) -> CollectedOutput:
    """``output`` with every form of every secret scrubbed, in the text and the spill file."""
    if not any(secrets):
        return output
    import hashlib

    from .record.redact import scrub, scrub_file

    text = scrub(output.text, secrets)
    if output.spill_path is not None and scrub_file(output.spill_path, secrets):
        # The digest and size describe the stream as it is kept: scrubbed.
        digest, size = hashlib.sha256(), 0
        with open(output.spill_path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
        return attrs.evolve(output, text=text, sha256=digest.hexdigest(), total_bytes=size)
    if text == output.text:
        return output
    if not output.truncated:
        raw = text.encode("utf-8", "surrogateescape")
        return attrs.evolve(
            output, text=text, sha256=hashlib.sha256(raw).hexdigest(), total_bytes=len(raw)
        )
    return attrs.evolve(output, text=text)
