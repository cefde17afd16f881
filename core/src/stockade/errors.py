"""Typed errors with a machine-readable code, an exit status and an actionable message.

Every error Stockade raises on purpose is a :class:`StockadeError`. Callers (the CLI, an MCP
server, an agent loop) turn it into a structured value with :meth:`StockadeError.to_dict`
instead of showing a traceback to a model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar


class StockadeError(Exception):
    """Base class: ``code`` names the kind of failure, ``hint`` says what to do about it."""

    code: ClassVar[str] = "stockade_error"
    exit_status: ClassVar[int] = 125

    def __init__(
        self, message: str, *, hint: str | None = None, details: Mapping[str, object] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details: dict[str, object] = dict(details or {})

    def to_dict(self) -> dict[str, object]:
        """The error as a JSON-ready mapping: ``code``, ``message``, ``hint``, ``details``."""
        return {
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
            "details": self.details,
        }

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(StockadeError):
    """The request or the command line is malformed."""

    code = "usage"


class ConfigError(StockadeError):
    """The configuration cannot be read or does not match its schema."""

    code = "config"


class PluginError(StockadeError):
    """A plugin is unknown, duplicated, or broke its contract."""

    code = "plugin"


class Unsupported(StockadeError):
    """The selected executor or sandbox cannot honour an option that was asked for."""

    code = "unsupported"


class SandboxUnavailable(StockadeError):
    """A confined mode was requested and no usable sandbox provider can give it."""

    code = "sandbox_unavailable"


class BadCwd(StockadeError):
    """The working directory does not exist or is not a directory."""

    code = "bad_cwd"


class UnsafeRoot(StockadeError):
    """A folder that must never be writable was named as a writable root; nothing ran.

    ``details`` names the folder (``path``, ``resolved``), what named it (``role``), the
    rule it broke (``rule``) and the folder that rule is about (``folder``); see
    :mod:`stockade.confine.roots`.
    """

    code = "unsafe_root"
    exit_status = 126


class ProgramNotFound(StockadeError):
    """The program is not on the PATH that was searched, or not an executable file."""

    code = "program_not_found"
    exit_status = 127


class SpawnFailed(StockadeError):
    """The operating system refused to start the program (permissions, bad format, ...)."""

    code = "spawn_failed"
    exit_status = 126


class PolicyDenied(StockadeError):
    """The approval stage denied the command; it did not run."""

    code = "policy_denied"
    exit_status = 126


class PolicyHeld(StockadeError):
    """The command needs a person's approval and none was given; it did not run."""

    code = "policy_held"
    exit_status = 126


class CredentialUnavailable(StockadeError):
    """No credential broker resolved a handle the command asked for; it did not run."""

    code = "credential_unavailable"


class RecorderFailed(StockadeError):
    """A recorder raised. Before the run, the command is refused; after, the result is kept.

    Attributes:
        result: the :class:`~stockade.request.result.RunResult` when the command had already run.
    """

    code = "recorder_failed"

    def __init__(self, message: str, *, hint: str | None = None, result: object = None) -> None:
        super().__init__(message, hint=hint)
        self.result = result
