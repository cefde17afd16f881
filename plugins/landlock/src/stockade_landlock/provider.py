"""The ``landlock`` sandbox provider: confinement without namespaces.

Landlock needs no user namespace, so it works where bubblewrap cannot start: under Ubuntu's
AppArmor restriction, in containers, as an ordinary user on kernels from 5.13. The work
(rulesets, scratch directories, the seccomp filter; see :mod:`stockade_landlock.engine`) is
imported on first use: every ``stockade`` start registers this class, few confine with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from stockade.confine.promises import CORE, Gap, Promise
from stockade.confine.provider import SandboxProvider
from stockade.errors import SandboxUnavailable
from stockade.request.literals import Mode
from stockade.request.plan import HiddenPath, LaunchPlan, Probe, SandboxFacts
from stockade.request.result import ProcessOutcome
from stockade.request.spec import ExecSpec

from . import supervisor

if TYPE_CHECKING:
    from .engine import Engine


class LandlockSandbox(SandboxProvider):
    """Confines commands with Landlock and the shared seccomp policy, without namespaces.

    Settings (``[plugins.settings.landlock]``): see :class:`~stockade_landlock.settings.Settings`.
    """

    PLUGIN_NAME = "landlock"
    MODES: ClassVar[frozenset[Mode]] = frozenset({"read-only", "workspace-write"})
    PRIORITY = 50  # below bubblewrap: namespaces hide more (other processes, host /tmp)
    # Protected paths read-only while the command runs, other processes' /proc entries
    # refused: the supervisor, where the kernel has what it needs; elsewhere the host puts
    # protected paths back after the run, and /proc is as the kernel shows it.
    PROMISES: ClassVar[frozenset[Promise]] = CORE | (
        {Promise.PROTECTED_READ_ONLY, Promise.PROCESS_ENTRIES, Promise.NEW_NAMES_REFUSED}
        if supervisor.declared()
        else set()
    )
    GAPS: ClassVar[tuple[Gap, ...]] = (
        Gap(
            Promise.PID_NAMESPACE,
            "no PID namespace: every process's number is listed in /proc (getdents cannot be "
            "filtered); their entries cannot be opened",
        ),
        Gap(Promise.NETWORK_NAMESPACE, "no network namespace: the host's interfaces are listed"),
        Gap(Promise.PRIVATE_VIEW, "no mount namespace: the host's /tmp and /run stay listable"),
        Gap(
            Promise.PROTECTED_NEVER_VISIBLE,
            "no overlay without a mount namespace: a command writes the real folder; new "
            "protected names are refused, but a .git it makes itself (git init), or a repository "
            "under another name (git init --bare), is visible while it runs and quarantined after",
        ),
        *(
            ()
            if supervisor.declared()
            else (
                Gap(
                    Promise.NO_SETID,
                    "no supervisor: the filter refuses the bits, but a privileged program already "
                    "there (the person's, or one a bubblewrap step left in the agent's cache or "
                    "run home) can be rewritten through a shared memory map, moved or linked, "
                    "and an access ACL can make a setgid file without group-execute executable",
                ),
            )
        ),
    )

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        from .engine import Engine

        self.engine: Engine = Engine(self.options)
        self.settings = self.engine.settings

    @classmethod
    def probe(cls) -> Probe:
        """Whether Landlock is enabled here, which ABI it offers, and the seccomp filter."""
        from .engine import Engine

        return Engine.probe()

    def level(self) -> int:
        """The ABI in use: the kernel's, capped by the ``max_abi`` setting."""
        return self.engine.level()

    def confine(self, spec: ExecSpec) -> LaunchPlan:
        """Prepare the rulesets and the filter; the plan's ``restrict`` applies them."""
        if spec.mode not in self.MODES:
            raise SandboxUnavailable(
                f"landlock does not run {spec.mode} commands",
                hint="danger-full-access runs unconfined, without this provider",
            )
        return self.engine.confine(spec)

    def hides(self, path: str, spec: ExecSpec) -> HiddenPath | None:
        """Where ``spec``'s rules keep ``path`` from the command: the host's ``/tmp``,
        ``/var/tmp``, ``/run``, ``/dev`` (but its few devices) and homes' ``.cache``, the
        masked credential stores, system secrets, ``deny_read`` and the store, less what
        the rules grant again beneath them; from the rules :meth:`confine` made (made again
        if it did not confine ``spec``)."""
        hiding = self.engine.recent.recall(spec)
        if hiding is None:  # confine it once, for its rules: they are what hides
            self.release(self.confine(spec))
            hiding = self.engine.recent.recall(spec)
        return hiding.find(path) if hiding is not None else None

    def interpret(self, plan: LaunchPlan, outcome: ProcessOutcome) -> SandboxFacts:
        """Add ``denied`` when a failed run's stderr reads like a Landlock or seccomp refusal."""
        return self.engine.interpret(plan, outcome)

    def release(self, plan: LaunchPlan) -> None:
        """Close the plan's descriptors and rulesets; give its scratch directory back."""
        super().release(plan)
        self.engine.release(plan)

    def close(self) -> None:
        """Close the cached rulesets and remove the scratch folders (the host is closing)."""
        self.engine.close()


def __getattr__(name: str) -> object:
    """``missing_at``, ``Prepared`` and the rest still answer here, from the engine."""
    if name.startswith("__"):  # the import system asks for __path__ and the like
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import engine

    try:
        return getattr(engine, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
