"""What the host watches while a command runs in its workspace: its quota, what changed
(:mod:`stockade.run.quota`, :mod:`stockade.run.changes`), and the protected paths
(:mod:`stockade.run.guard`).

All begin just before the command starts and end when it has exited. A ``read-only``
command cannot write its workspace (its sandbox refuses), so nothing is watched for it; a
``danger-full-access`` one runs unconfined on purpose, so its protected paths are not.
Every path that executes a command (a run, an async run, a held step, a background task)
goes through an :class:`Observation`, so none skips the check after the run.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import attrs

from .executor import AbortToken

if TYPE_CHECKING:
    from ..confine.protected import Survey
    from ..layers import Landing, Session
    from ..request.plan import LaunchPlan
    from ..request.result import Changes, Guarded, ProcessOutcome
    from ..request.spec import ExecSpec
    from . import quota, snapshot
    from .kept import Tracker, Watches


class Observation:
    """The watches on one command's workspace.

    Attributes:
        token: the token to hand the executor: the caller's, or, under a quota, one the
            quota can fire as well (the caller's still stops the command).
    """

    def __init__(
        self,
        spec: ExecSpec,
        abort: AbortToken | None,
        plan: LaunchPlan | None = None,
        *,
        quota_mb: int | None = None,
        track_changes: bool = False,
        watches: Watches | None = None,
        quarantine: str,
    ) -> None:
        self.token = abort
        self.guarded: Guarded | None = None
        self._own: AbortToken | None = None
        self._quota: quota.Watch | None = None
        self._changes: Tracker | None = None
        self._survey: Survey | None = None
        self._snapshot: snapshot.Snapshot | None = None
        self._folder = ""
        self._room: int | None = None
        self._layers: Session | None = None
        self._commit = spec.commit
        self.landing: Landing | None = None
        if spec.mode == "read-only":
            return
        if spec.layer_store is not None:
            from ..layers.snapshots import refuse_direct, refuse_holders

            if spec.mode != "danger-full-access":  # unconfined: no writable root at all
                refuse_holders((spec.workspace, *spec.grant_writable), spec.layer_store)
            if not (plan is not None and plan.layers):
                refuse_direct(spec.workspace, spec.layer_store, plan.facts.provider if plan else "")
        if spec.commit in ("never", "ask") and not (plan is not None and plan.layers):
            from ..errors import SandboxUnavailable

            what = "a dry run" if spec.commit == "never" else "commit = ask"
            raise SandboxUnavailable(
                f"{what} needs layers, and this command would write its folder directly "
                f"({plan.facts.provider if plan else 'no provider'})",
                hint="run it under bubblewrap with layers (see `stockade doctor`)",
            )
        if plan is not None and plan.layers:
            self._layered(spec, plan, abort, quota_mb=quota_mb, quarantine=quarantine)
            return
        if spec.mode != "danger-full-access":
            self._guard(spec, plan, quarantine)
        try:
            self._start(spec, abort, quota_mb=quota_mb, track_changes=track_changes)
            if self._changes is None and watches is not None:
                self._changes = watches.track(spec.workspace)
        except BaseException:
            self.close()  # the changes watch holds an inotify instance and a thread
            raise

    def _start(
        self, spec: ExecSpec, abort: AbortToken | None, *, quota_mb: int | None, track_changes: bool
    ) -> None:
        """The changes watch (an agent's own workspace; other folders only through a warm
        server's ``watches``), and the quota's with a token of its own."""
        self._changes = self._track(spec) if track_changes else None
        limit = quota_mb
        if limit is None:
            return
        from . import quota

        self._own = self.token = AbortToken()
        self._quota = quota.Watch(spec.workspace, limit * quota.MIB, self._own, forward=abort)

    def _layered(
        self,
        spec: ExecSpec,
        plan: LaunchPlan,
        abort: AbortToken | None,
        *,
        quota_mb: int | None,
        quarantine: str,
    ) -> None:
        """The command writes into layers (:mod:`stockade.layers`): they are the list of
        what changed and what the quota measures; they land when it ends (:meth:`finish`)."""
        from ..layers import Rules, Session
        from . import quota

        survey = plan.protection
        rules = Rules(
            quarantine,
            writable_dotfiles=tuple(survey.writable_dotfiles) if survey else (),
            bare=survey.bare if survey else (),
            hooks=survey.hooks if survey else (),
        )
        assert spec.layer_store is not None  # noqa: S101 - a provider layers only then
        self._layers = Session(
            plan.layers,
            rules,
            store=spec.layer_store,
            action_id=spec.action_id,
            workspace=spec.workspace,
        )
        self._folder = quarantine
        if quota_mb is None:
            return
        # The layer holds what the command adds: it may not take more than the quota.
        self._own = self.token = AbortToken()
        uppers = self._layers.uppers()
        self._quota = quota.Watch(uppers[0], quota_mb * quota.MIB, self._own, forward=abort)
        self._room = max(quota_mb * quota.MIB - quota.usage(spec.workspace), 0)

    def _land(self, outcome: ProcessOutcome | None) -> None:
        """Land the layers (or not, by the ``commit`` choice or the quota); under ``ask``,
        keep them for a person (a command that did not finish has no result to show: its
        layers are discarded)."""
        session, self._layers = self._layers, None
        if session is None:
            return
        succeeded = outcome is not None and outcome.exit_code == 0 and not outcome.timed_out
        wait = self._commit == "ask" and outcome is not None
        keep = self._commit == "always" or (self._commit == "on-success" and succeeded) or wait
        self.landing = session.end(keep=keep, room=self._room, wait=wait)

    def _guard(self, spec: ExecSpec, plan: LaunchPlan | None, quarantine: str) -> None:
        """The survey of protected paths (the provider's, else the host's own) and, when
        the provider does not keep them read-only itself, their snapshot.

        Raises:
            SandboxUnavailable: the survey or the snapshot cannot be made (too large, a
                symlinked protected path, an unreadable one): the command does not run.
        """
        from ..confine import protected
        from . import guard

        survey = plan.protection if plan is not None else None
        if survey is None:
            roots = protected.writable_roots((spec.workspace, *spec.grant_writable))
            survey = protected.survey(
                roots,
                protected.DEFAULT_SCAN_LIMIT,
                setting="the provider's scan_limit",
                writable_dotfiles=protected.opened(spec.writable_dotfiles),
            )
        self._survey, self._snapshot = guard.begin(survey)
        self._folder = quarantine

    def _check(self) -> Guarded | None:
        """The look after the run: quarantine what appeared, put back what changed."""
        survey, self._survey = self._survey, None
        if survey is None:
            return None
        from . import guard

        try:
            return guard.check(survey, self._snapshot, self._folder)
        finally:
            guard.end(survey)

    @staticmethod
    def _track(spec: ExecSpec) -> Tracker | None:
        """The changes watch on an agent's workspace. (A person's own profile works in
        whatever folder they are in, a home or a whole checkout: a process of its own does
        not watch it; a warm server lends it one it keeps, ``watches``.)"""
        from . import changes

        try:
            return changes.Watch(spec.workspace)
        except changes.TooLarge:
            return None  # bounded: a tree past the bound gets no list

    def finish(self, outcome: ProcessOutcome) -> tuple[ProcessOutcome, Changes | None]:
        """``outcome`` with what the watches saw (``limit_hit = "quota"`` when the quota
        stopped the command, or when it left the workspace over its quota; ``guarded``:
        what the check after the run quarantined and restored), and what changed in the
        workspace (as the command left it, before the check)."""
        if self._layers is not None:
            return self._finish_layered(outcome)
        tracker, self._changes = self._changes, None
        changed = tracker.finish() if tracker is not None else None
        watch, self._quota = self._quota, None
        try:
            guarded = self.guarded = self._check()
        except BaseException:
            if watch is not None:
                with contextlib.suppress(OSError):
                    watch.finish()
            self._close_token()
            raise
        if guarded is not None and (guarded.quarantined or guarded.restored or guarded.failed):
            outcome = attrs.evolve(outcome, guarded=guarded)
        if watch is None:
            return outcome, changed
        try:
            watch.finish()
        finally:
            self._close_token()
        if not watch.exceeded:
            return outcome, changed
        return attrs.evolve(outcome, limit_hit="quota", aborted=False), changed

    def _finish_layered(self, outcome: ProcessOutcome) -> tuple[ProcessOutcome, Changes | None]:
        watch, self._quota = self._quota, None
        try:
            if watch is not None:
                watch.finish()
            self._land(outcome)
        finally:
            self._close_token()
        landing = self.landing
        assert landing is not None  # noqa: S101 - _land sets it
        guarded = self.guarded = landing.guarded
        if guarded is not None:
            outcome = attrs.evolve(outcome, guarded=guarded)
        outcome = attrs.evolve(outcome, landed=landing.kept)
        if (watch is not None and watch.exceeded) or landing.kept == "over-quota":
            outcome = attrs.evolve(outcome, limit_hit="quota", aborted=False)
        return outcome, landing.changes

    def close(self) -> None:
        """Stop watching without a result (the command did not finish, or never started);
        the protected paths are still checked: it may have run part of the way."""
        if self._layers is not None:
            try:
                self._land(None)
            except OSError:
                self.landing = None
            self.guarded = self.landing.guarded if self.landing else None
        try:
            self.guarded = self._check()
        except OSError:
            self.guarded = None  # the error that stopped the run is what the caller sees
        tracker, self._changes = self._changes, None
        if tracker is not None:
            tracker.close()
        watch, self._quota = self._quota, None
        if watch is not None:
            with contextlib.suppress(OSError):
                watch.finish()
        self._close_token()

    def _close_token(self) -> None:
        if self._own is not None:
            self._own.close()
            self._own = None
