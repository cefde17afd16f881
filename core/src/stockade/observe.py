"""What the host watches while a command runs in its workspace: its quota, what changed.

Both begin just before the command starts and end when it has exited. A ``read-only``
command cannot write its workspace (its sandbox refuses), so nothing is watched for it.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import attrs

from .executor import AbortToken

if TYPE_CHECKING:
    from . import quota
    from .config import Config
    from .types import ExecSpec, ProcessOutcome


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
        if spec.mode == "read-only":
            return
        limit = config.profile(spec.profile).quota_mb
        if limit is not None:
            from . import quota

            self._own = self.token = AbortToken()
            self._quota = quota.Watch(spec.workspace, limit * quota.MIB, self._own, forward=abort)

    def finish(self, outcome: ProcessOutcome) -> ProcessOutcome:
        """``outcome`` with what the watches saw: ``limit_hit = "quota"`` when it stopped
        the command, or when the command left the workspace over its quota."""
        watch, self._quota = self._quota, None
        if watch is None:
            return outcome
        try:
            watch.finish()
        finally:
            self._close_token()
        if not watch.exceeded:
            return outcome
        return attrs.evolve(outcome, limit_hit="quota", aborted=False)

    def close(self) -> None:
        """Stop watching without a result (the command did not finish)."""
        watch, self._quota = self._quota, None
        if watch is not None:
            with contextlib.suppress(OSError):
                watch.finish()
        self._close_token()

    def _close_token(self) -> None:
        if self._own is not None:
            self._own.close()
            self._own = None
