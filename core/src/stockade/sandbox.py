"""The sandbox provider contract: turn a resolved spec into a confined launch plan.

A provider never starts processes; it describes how the executor must start one (a runner
prefix such as ``bwrap ...``, descriptors to pass, environment additions) and reports the
facts of the confinement. It must refuse, with :class:`~stockade.errors.SandboxUnavailable`,
any spec it cannot confine as asked: it never degrades to an unconfined run.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from .types import ExecSpec, LaunchPlan, Mode, Probe, SandboxFacts


class SandboxProvider(ABC):
    """Confines commands. Subclasses set the class attributes and implement :meth:`confine`.

    Attributes:
        PLUGIN_NAME: the name configuration selects it by.
        MODES: the modes it can enforce.
        PRIORITY: ``auto`` picks the usable provider with the highest priority.
    """

    PLUGIN_NAME: ClassVar[str]
    MODES: ClassVar[frozenset[Mode]]
    PRIORITY: ClassVar[int] = 0

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: Mapping[str, Any] = dict(options or {})

    @classmethod
    @abstractmethod
    def probe(cls) -> Probe:
        """Whether this provider works on this kernel, and if not, why not."""

    @abstractmethod
    def confine(self, spec: ExecSpec) -> LaunchPlan:
        """The launch plan that runs ``spec`` confined to ``spec.mode``."""


class Unconfined(SandboxProvider):
    """The provider for ``danger-full-access``: runs the program as it is, and says so."""

    PLUGIN_NAME = "none"
    MODES = frozenset({"danger-full-access"})
    PRIORITY = -1

    @classmethod
    def probe(cls) -> Probe:
        """Always usable: it confines nothing."""
        return Probe(usable=True, detail="confines nothing; only for danger-full-access")

    def confine(self, spec: ExecSpec) -> LaunchPlan:
        """Run the program directly, with the spec's environment and bounds."""
        return LaunchPlan(
            spec.program,
            spec.argv,
            cwd=spec.cwd,
            env=spec.env,
            stdin=spec.stdin,
            timeout=spec.timeout,
            kill_grace=spec.kill_grace,
            output_limit=spec.output_limit,
            memory_mb=spec.memory_mb,
            facts=SandboxFacts(self.PLUGIN_NAME, spec.mode, enforcement=None),
        )
