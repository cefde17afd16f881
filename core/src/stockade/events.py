"""The events a recorder sees, paired by ``action_id``, tagged by ``kind``, versioned.

Kept apart from :mod:`stockade.types` so that a host without a recorder never pays for
building them: the host imports this module only when some plugin records.
"""

from __future__ import annotations

import time
from typing import Literal

from attrs import field, frozen

from .types import Classification, Decision, Mode, Origin, RunResult


def _now() -> float:
    return time.time()


@frozen
class ActionEvent:
    """A command was requested and resolved (recorded before anything runs).

    Attributes:
        action_id: pairs the events of one command.
        argv: the argv as requested.
        cwd: the resolved working directory.
        mode: the effective sandbox mode.
        origin: who typed it.
        profile: the profile whose policy applies.
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    argv: tuple[str, ...]
    cwd: str = field(kw_only=True)
    mode: Mode = field(kw_only=True)
    origin: Origin = field(kw_only=True)
    profile: str = field(kw_only=True)
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["action"] = field(kw_only=True, default="action")


@frozen
class PermissionEvent:
    """The decision that admitted, held or refused a command.

    Attributes:
        action_id: pairs the events of one command.
        classification: what it was judged to affect.
        decision: the final decision.
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    classification: Classification
    decision: Decision = field(kw_only=True)
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["permission"] = field(kw_only=True, default="permission")


@frozen
class ResultEvent:
    """How a command ended: the whole result, kept text and digests of both streams.

    Attributes:
        action_id: pairs the events of one command.
        result: the full result.
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    result: RunResult
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["result"] = field(kw_only=True, default="result")


@frozen
class ErrorEvent:
    """A command that was allowed but could not run: no credential, no sandbox, no spawn.

    Attributes:
        action_id: pairs the events of one command.
        code: the error's machine-readable code.
        message: the error's message.
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    code: str
    message: str = field(kw_only=True)
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["error"] = field(kw_only=True, default="error")


@frozen
class GrantEvent:
    """A one-shot widening of one command's sandbox, granted by a person.

    Attributes:
        action_id: the command it widens (and only that one).
        writable: folders writable for it beyond its workspace.
        by: who granted it.
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    writable: tuple[str, ...] = field(kw_only=True)
    by: str = field(kw_only=True)
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["grant"] = field(kw_only=True, default="grant")


Event = ActionEvent | PermissionEvent | GrantEvent | ResultEvent | ErrorEvent
"""Everything a recorder sees, tagged by its ``kind`` field."""
