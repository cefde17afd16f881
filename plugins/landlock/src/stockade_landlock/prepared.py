"""One run's ruleset, filter and supervisor, ready for the thread that spawns the command."""

from __future__ import annotations

import functools

from attrs import frozen

from . import abi
from .loading import load_filter as _load_filter
from .rules import Rule
from .supervisor.serve import Supervisor

FULL_ABI = 6  # scopes for signals and abstract sockets: nothing left to seccomp's care


def missing_at(level: int, *, unix_sockets: bool = False) -> tuple[str, ...]:
    """What Landlock ABI ``level`` cannot enforce that this provider promises.

    With ``unix_sockets`` the seccomp filter lets ``socket(AF_UNIX)`` through, so below
    ABI 6 nothing keeps the command from abstract sockets outside the sandbox.
    """
    missing = []
    if level < 3:
        missing.append("truncate of files outside the writable roots (ABI 3)")
    if level < 5:
        missing.append("device ioctls (ABI 5)")
    if level < FULL_ABI:
        missing.append("signals to processes outside the sandbox (ABI 6)")
        if unix_sockets:
            missing.append("abstract Unix sockets outside the sandbox (ABI 6)")
    return tuple(missing)


@frozen
class Prepared:
    """This run's ruleset and filter, ready for the thread that spawns the command.

    Attributes:
        ruleset: a descriptor of this run's ruleset (the plan owns it): the shared rules
            (reads everywhere but the carve-outs, writes to the writable roots less their
            protected paths, TCP and scopes) and one rule of its own, for its scratch.
        program: the seccomp BPF program.
        scratch: the private scratch directory (removed by ``release``).
        rules: the shared rules, without the scratch rule (for the tests and the docs).
        supervisor: the run's supervisor, or ``None`` (no kernel support, or
            ``supervise = false``: the host puts the protected paths back after the run).
        veil: the command's extra layer over the supervisor's domain (a descriptor the
            plan owns: :class:`~stockade_landlock.supervisor.terminals.Veil`), with the
            supervisor.
    """

    ruleset: int
    program: bytes
    scratch: str
    rules: tuple[Rule, ...]
    supervisor: Supervisor | None = None
    veil: int | None = None

    def restrict(self) -> None:
        """Confine the calling thread for good: no capabilities, ``no_new_privs``, the
        ruleset, then seccomp (and the supervisor's filter, with the supervisor started in
        between: in this Landlock domain, without the filters)."""
        abi.drop_capabilities()
        abi.restrict_self(self.ruleset)
        if self.supervisor is None:
            _load_filter(self.program)
        else:
            veil = self.veil
            narrow = functools.partial(abi.restrict_self, veil) if veil is not None else None
            self.supervisor.arm(functools.partial(_load_filter, self.program), narrow)
