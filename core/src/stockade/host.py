"""The host: sequences the stages of one command and nothing else.

    admit (deciding, :mod:`stockade.policy`):
        resolve -> credentials -> classify -> enforce the class, check the roots
        -> gate -> decide (-> hold)                              => AdmittedStep
    carry out (doing, :mod:`stockade.run`, through a :class:`~stockade.run.doer.Doer`):
        confine -> execute, observed                             => Carried
    record (:mod:`stockade.record.recording`; ask: :mod:`stockade.policy.landing`) => RunResult

Each stage is a hook call or a plain function of its inputs; the host owns no policy, no
confinement and no process handling of its own. Between deciding and doing travels one
value, :class:`~stockade.request.step.AdmittedStep`: the same one whether the doer is in this
process, a warm server or a remote worker. Read :meth:`Host.run` to see the whole path of a
command, and :meth:`Host.resume` for a held one a person approved.

One host is one *run*: its commands are the run's steps, numbered from 1, which is what a
profile's budget counts and what names a held step (``run_id``, ``step``).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs
import pluggy

from . import caller
from .config.load import load_config
from .config.schema import Config
from .errors import StockadeError
from .layers.journal import recover_once
from .plugin.manager import Hooks, get_plugin_manager
from .policy import credentials, decide, held, landing
from .policy.breaker import BY, Breaker
from .policy.enforce import enforce_class
from .policy.resolve import resolve
from .record.recording import Recording
from .request.spec import ExecRequest, ExecSpec, Profile, new_run_id
from .request.step import AdmittedStep, Agent, Carried
from .request.verdict import Classification, Decision
from .run.doer import Admission, Doer, OnOutput, Prepared
from .run.executor import AbortToken

if TYPE_CHECKING:
    from .record.store import HeldStep, Store
    from .request.result import RunResult
    from .run.tasks import TaskInfo, TaskOutput, Tasks
    from .workspace.folders import Home


class Host:
    """Runs commands through the plugins that configuration selects.

    Args:
        config: the configuration (embedded defaults when omitted).
        environ: the ambient environment children are filtered from (``os.environ``).
        plugins: extra plugin objects, registered after the installed ones.
        load_entry_points: load installed plugins from the ``stockade`` entry points.

    Attributes:
        run_id: the run this host's commands are steps of.
        doer: what carries out its admitted steps (:class:`~stockade.run.doer.Doer`).
        recording: what writes its record (:class:`~stockade.record.recording.Recording`).
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
        self.recording = Recording(self.hooks)
        self.breaker = Breaker(self.recording, lambda: self.store, self.run_id, self.config)
        self.doer = Doer(
            self.config, sandboxes=self.sandboxes, executors=self.executors, run_id=self.run_id
        )
        self._own_run(None, None)

    def _own_run(self, cwd: str | None, warm: Host | None) -> None:
        """What a run owns: its steps, clock, store, home, tasks and lock (:meth:`for_run`)."""
        self._steps = 0
        self._started: float | None = None
        self.cwd = cwd
        self._store: Store | None = None
        self._home: Home | None = None
        self._tasks: Tasks | None = None
        self._lock = threading.Lock()
        self._warm = warm  # the host whose plugins, provider and store it shares
        self.kept = False  # a run that spans calls: closing it at the end of one does nothing

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

    def running(self) -> int:
        """How many of its background tasks are running now."""
        return 0 if self._tasks is None else self._tasks.running()

    def for_run(
        self,
        *,
        environ: Mapping[str, str] | None = None,
        cwd: str | None = None,
        run_id: str | None = None,
        profiles: Mapping[str, Profile] | None = None,
    ) -> Host:
        """A host for a run of its own sharing this one's warm parts (plugins, providers and
        their probes, executor, store); what a run owns (:meth:`_own_run`) is its own.
        ``environ``: the caller's ambient environment; ``cwd``: where a request without one
        runs (else :mod:`stockade.caller`'s); ``profiles``: this run's own agent profiles
        beside the configured ones (an episode). Closing it leaves the warm parts open."""
        run = object.__new__(Host)
        config = attrs.evolve(self.config, agents={**self.config.agents, **(profiles or {})})
        run.config, run.pm, run.hooks = config, self.pm, self.hooks
        run.executors, run.sandboxes, run.rules = self.executors, self.sandboxes, self.rules
        run.environ = dict(self.environ if environ is None else environ)
        run.run_id = run_id or new_run_id()
        run.recording = self.recording
        run.breaker = Breaker(run.recording, lambda: run.store, run.run_id, run.config)
        run.doer = self.doer.for_run(run.run_id)
        run._own_run(cwd, self)
        return run

    # --- the path of one command ---------------------------------------------------------

    def run(self, request: ExecRequest, *, abort: AbortToken | None = None) -> RunResult:
        """Run one command through every stage and return its structured result.

        Raises:
            StockadeError: a stage refused the command (it did not run), or it could not be
                started; see :mod:`stockade.errors` for the codes.
        """
        admission = self.admit(request)  # deciding
        carried = self.carry_out(self.prepare(admission), abort=abort)  # doing
        return self.finish(admission.spec, carried)  # record

    def admit(self, request: ExecRequest) -> Admission:
        """Every deciding stage: resolve, credentials, classify, enforce, roots, gate, decide.

        Raises:
            UnsafeRoot: a writable root it would get is a home, a system folder, the store,
                ... (:mod:`stockade.confine.roots`); checked once its mode is known, before
                the decision, and recorded.
            PolicyHeld: the command waits for a person; it is kept as this run's step.
        """
        step, elapsed = self._next_step()
        agent = self._agent(request.profile)
        spec = resolve(
            request,
            self.config,
            self.environ,
            run_id=self.run_id,
            step=step,
            run_elapsed=elapsed,
            home=self._home_for(agent),
            agent=agent,
            here=self.cwd if self.cwd is not None else caller.cwd(),
        )
        secrets = credentials.recorded(self.hooks, spec, self.recording, self.config)
        with self.recording.batch():  # one transaction, stored before the step can start
            self.recording.action(spec)
            classification = self.classify(spec)
            spec = enforce_class(spec, classification)
            decide.check_roots(spec, self.config, self.environ, self.recording)
            if request.gate is not None:
                decide.gate(spec, classification, request.gate, self.recording)
            spec = self._private(spec, agent)  # hidden unless granted; a grant taints the run
            tripped = self.breaker.admit(spec, classification, agent)  # the step's own taints
            decision = decide.decide(
                self.hooks,
                spec,
                classification,
                agent.profile,
                recording=self.recording,  # flushed before a person is asked or it is held
                hold=lambda pending: self.store.hold(pending),  # noqa: PLW0108 - on first use
                breaker=tripped,
            )
        # A person answered the breaker's ask: the run held both when the step was shown.
        over = tripped is not None and decision.verdict == "allow"
        return self._admitted(spec, classification, decision, agent, secrets, over_breaker=over)

    def _private(self, spec: ExecSpec, agent: Agent) -> ExecSpec:
        """``spec`` with what its sandbox hides (:meth:`Breaker.private`); errors recorded."""
        try:
            return self.breaker.private(spec, agent)
        except StockadeError as error:
            self.recording.error(spec, error)
            raise

    def _admitted(
        self,
        spec: ExecSpec,
        classification: Classification,
        decision: Decision,
        agent: Agent,
        secrets: Mapping[str, str],
        *,
        over_breaker: bool,  # a person approved the breaker's ask
    ) -> Admission:
        egress = decide.egress_rule(spec, classification, agent.profile, self.config, over_breaker)
        step = AdmittedStep(spec, classification, decision, agent, egress=egress)
        return Admission(step, secrets)

    def prepare(self, admission: Admission) -> Prepared:
        """The doer's plan for an admitted step; a step that cannot start is recorded.

        Raises:
            SandboxUnavailable: no usable provider can enforce its mode; never unconfined.
        """
        action_id, step = admission.spec.action_id, admission.step
        if admission.spec.layer_store is not None:  # a killed host's layers, once a process
            recover_once(admission.spec.layer_store, self.recording.record)
        over = step.egress is not None and step.egress.over_breaker
        at = self.breaker.at_connection  # the breaker where bytes leave, on every connection
        check = functools.partial(at, step.spec.run_id, step.agent.profile, over_breaker=over)
        try:
            return self.doer.prepare(
                step,
                admission.secrets,
                on_connection=lambda connection: self.recording.connection(action_id, connection),
                check=check,
            )
        except StockadeError as error:
            self.recording.error(admission.spec, error)  # admitted, yet it cannot run
            raise

    def carry_out(
        self,
        prepared: Prepared,
        *,
        abort: AbortToken | None = None,
        on_output: OnOutput | None = None,
    ) -> Carried:
        """The doer carries out a prepared step; an error that stops it closes its record."""
        try:  # inside a caller's batch: what it kept of this step is stored before it starts
            self.recording.flush()
        except StockadeError:
            prepared.release()
            raise
        try:
            return self.doer.carry_out(prepared, abort=abort, on_output=on_output)
        except StockadeError as error:
            self.recording.error(prepared.spec, error)
            raise

    async def run_async(
        self, request: ExecRequest, *, abort: AbortToken | None = None
    ) -> RunResult:
        """:meth:`run` for asyncio: cancelling the awaiting task kills the command."""
        import asyncio  # not at the top: asyncio costs more to import than a CLI run

        prepared = await asyncio.to_thread(lambda: self.prepare(self.admit(request)))
        try:
            carried = await self.doer.carry_out_async(prepared, abort=abort)
        except StockadeError as error:
            self.recording.error(prepared.spec, error)
            raise
        except asyncio.CancelledError:
            why = "the awaiting task was cancelled, so the command was killed"
            self.recording.error(prepared.spec, code="cancelled", message=why)  # it must close
            raise
        return self.finish(prepared.spec, carried)

    def finish(self, spec: ExecSpec, carried: Carried) -> RunResult:
        """Record a carried-out step (result and taints: one batch); waiting writes are asked."""
        with self.recording.batch(ran=carried.result):
            result = self.breaker.finish(spec, carried, self.recording.result)
        return landing.ask(self.hooks, self.recording, spec, result)

    def classify(self, spec: ExecSpec) -> Classification:
        """Every classifier votes; the most severe kind wins and all reasons are kept."""
        return decide.classify(self.hooks, self.rules, spec)

    def _agent(self, name: str) -> Agent:
        """The profile ``name``, looked up once for the whole path of a request."""
        from .workspace.folders import has_own

        return Agent(self.config.profile(name), has_own(self.config, name))

    def _home_for(self, agent: Agent) -> str | None:
        """This run's home, made on an agent's first command; a person's profile has none."""
        if not agent.own_workspace:
            return None
        from .workspace.folders import Home

        with self._lock:
            if self._home is None:
                self._home = Home(self.config, self.run_id)
            return self._home.path

    def resume_steps(self) -> None:
        """Number the next step after the store's highest for this run (a kept run's id)."""
        with self._lock:
            self._steps = max(self._steps, self.store.last_step(self.run_id))

    def _next_step(self) -> tuple[int, float]:
        with self._lock:
            now = time.monotonic()
            if self._started is None:
                self._started = now
            self._steps += 1
            return self._steps, now - self._started

    # --- background tasks ----------------------------------------------------------------

    def start(self, request: ExecRequest, *, owner: str) -> TaskInfo:
        """Admit and prepare ``request`` now; run it in the background as ``owner``'s task.

        Raises:
            StockadeError: as :meth:`run`, before anything runs (denied, held, ...).
            TooManyTasks: ``owner`` has as many tasks running as it may.
        """
        tasks, ready = self.tasks, self.prepare(self.admit(request))  # tasks made first

        def runner(abort: AbortToken, on_output: OnOutput) -> RunResult:
            carried = self.carry_out(ready, abort=abort, on_output=on_output)
            return self.finish(ready.spec, carried)

        try:
            return tasks.start(owner, request.argv, runner, ready.secrets, ready.spec.action_id)
        except BaseException as error:
            if isinstance(error, StockadeError):
                self.recording.error(ready.spec, error)
            ready.release()
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

    # --- held steps ----------------------------------------------------------------------

    @property
    def store(self) -> Store:
        """The embedded store (opened on first use)."""
        if self._warm is not None:
            return self._warm.store
        if self._store is None:
            from .record.store import open_store

            with self._lock:
                if self._store is None:
                    self._store = open_store(self.config)
        return self._store

    def answer(
        self, run_id: str, step: int, *, approve: bool, by: str, reason: str = "declined"
    ) -> HeldStep:
        """Record a person's answer to a held step (see :func:`stockade.policy.held.answer`)."""
        return held.answer(
            self.store, self.recording, run_id, step, approve=approve, by=by, reason=reason
        )

    def resume(
        self,
        run_id: str,
        step: int,
        *,
        abort: AbortToken | None = None,
        on_output: OnOutput | None = None,
    ) -> RunResult:
        """Run a held step a person approved, exactly as it was shown; once.

        A step that already ran gives back its result; ``on_output`` sees its output as it comes.

        Raises:
            PolicyHeld: nobody has answered yet.
            PolicyDenied: a person declined it.
            UsageError: no such step, or another process is running it now.
        """
        from .request.wire import to_json

        found = self.store.get(run_id, step)
        done = held.settled(found)
        if done is not None:
            return done
        agent = self._agent(found.spec.profile)
        held.decide_again(found, agent.profile, self.breaker, self.store, self.recording)
        # The workspace first: while another run holds it, the step stays approved.
        with self.doer.hold(found.spec, agent):
            held.claim(self.store, found)
            result = held.kept(
                self.store, found, lambda: self._release(found, agent, abort, on_output)
            )
            self.store.finish(run_id, step, outcome=to_json(result))
        return result

    def readmit(self, run_id: str, step: int) -> Admission:
        """A held step a person approved, claimed and decided again, to be carried out
        elsewhere (a pool's worker); the caller keeps its outcome with ``store.finish``.

        Raises:
            StockadeError: as :meth:`resume` raises it.
        """
        found = self.store.get(run_id, step)
        held.settled(found)  # waiting or declined: raised; ran: the claim refuses it
        agent = self._agent(found.spec.profile)
        held.decide_again(found, agent.profile, self.breaker, self.store, self.recording)
        held.claim(self.store, found)
        return held.kept(self.store, found, lambda: self._readmitted(found, agent))

    def _release(
        self,
        found: HeldStep,
        agent: Agent,
        abort: AbortToken | None,
        on_output: OnOutput | None,
    ) -> RunResult:
        """A held step, approved and claimed: checked again, decided, carried out, recorded."""
        admission = self._readmitted(found, agent)
        carried = self.carry_out(self.prepare(admission), abort=abort, on_output=on_output)
        return self.finish(admission.spec, carried)

    def _readmitted(self, found: HeldStep, agent: Agent) -> Admission:
        """A held step, approved and claimed: checked again, allowed, credentials resolved."""
        spec = held.rehome(found.spec, self._home_for(agent))
        with self.recording.batch():  # one transaction, stored before the step can start
            spec = self._private(spec, agent)  # as the workspace is now
            decision, secrets = held.allowed(
                found, spec, self.hooks, self.config, environ=self.environ, recording=self.recording
            )
        over, kind = found.decision.by == BY, found.classification  # over: the breaker's ask
        return self._admitted(spec, kind, decision, agent, secrets, over_breaker=over)

    def close(self) -> None:
        """Kill every background task; release the executor's helpers and the store; remove
        the run's home. A kept run (one that spans calls) stays open until ``kept`` is false."""
        if self.kept:
            return
        if self._tasks is not None:
            self._tasks.close()
        if self._home is not None:
            self._home.remove()
            self._home = None
        if self._warm is not None:
            return  # the warm parts stay open for the next run
        self.doer.close()
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
