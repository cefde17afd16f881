"""What the host watches while a command runs in its workspace: its quota, what changed
(:mod:`stockade.quota`, :mod:`stockade.changes`).

Both begin just before the command starts and end when it has exited. A ``read-only``
command cannot write its workspace (its sandbox refuses), so nothing is watched for it.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import attrs

from .executor import AbortToken

if TYPE_CHECKING:
    from . import changes, quota
    from .config import Config
    from .types import Changes, ExecSpec, ProcessOutcome


class Observation:
    """The watches on one command's workspace.

    Attributes:
        token: the token to hand the executor: the caller's, or, under a quota, one the
            quota can fire as well (the caller's still stops the command).
    """

    def __init__(self, spec: ExecSpec, config: Config, abort: AbortToken | None) -> None:
        self.token = abort
        self._own: AbortToken | None = None
        self._quota: quota.Watch | None = None
        self._changes: changes.Watch | None = None
        if spec.mode == "read-only":
            return
        self._changes = self._track(spec, config)
        limit = config.profile(spec.profile).quota_mb
        if limit is None:
            return
        from . import quota

        self._own = self.token = AbortToken()
        try:
            self._quota = quota.Watch(spec.workspace, limit * quota.MIB, self._own, forward=abort)
        except BaseException:
            self.close()  # the changes watch holds an inotify instance and a thread
            raise

    @staticmethod
    def _track(spec: ExecSpec, config: Config) -> changes.Watch | None:
        """The changes watch on an agent's workspace. A person's own profile works in
        whatever folder they are in (a home, a whole checkout): it is not watched."""
        from .workspaces import has_own

        if not has_own(config, spec.profile):
            return None
        from . import changes

        try:
            return changes.Watch(spec.workspace)
        except changes.TooLarge:
            return None  # bounded: a tree past the bound gets no list

    def finish(self, outcome: ProcessOutcome) -> tuple[ProcessOutcome, Changes | None]:
        """``outcome`` with what the watches saw (``limit_hit = "quota"`` when the quota
        stopped the command, or when it left the workspace over its quota), and what
        changed in the workspace."""
        tracker, self._changes = self._changes, None
        changed = tracker.finish() if tracker is not None else None
        watch, self._quota = self._quota, None
        if watch is None:
            return outcome, changed
        try:
            watch.finish()
        finally:
            self._close_token()
        if not watch.exceeded:
            return outcome, changed
        return attrs.evolve(outcome, limit_hit="quota", aborted=False), changed

    def close(self) -> None:
        """Stop watching without a result (the command did not finish)."""
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
