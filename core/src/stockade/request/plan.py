"""What a sandbox provider reports and builds: its probe, the facts of a run, the launch plan."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from attrs import field, frozen

if TYPE_CHECKING:
    from ..confine.protected import Survey
    from ..layers.place import Layer
from .checks import _frozen_map, _ints, _strings
from .literals import Enforcement, HiddenKind, Mode, Protection, Writes
from .spec import ExecSpec, Limits


@frozen
class HiddenPath:
    """A path the sandbox hides from a command, and what hides it.

    Attributes:
        path: the path as the command names it (its program, an argument).
        folder: the hidden folder (or file) it lies in, resolved.
        kind: what hides it: ``private`` (the host's ``/tmp``, ``/var/tmp``, ``/run``,
            ``/dev/shm`` or a home's ``.cache``: the sandbox has its own), ``credential-store``,
            ``system-secret``, ``deny-read``, ``store`` (Stockade's own state), ``socket`` or
            ``private-data`` (a ``private`` glob's match or a file the sidecar marks).
    """

    path: str
    folder: str
    kind: HiddenKind

    @property
    def reason(self) -> str:
        """What hides it, as a person reads it: ``private /var/tmp``."""
        return f"{_HIDDEN_LABELS[self.kind]} {self.folder}"


_HIDDEN_LABELS: dict[str, str] = {
    "private": "private",
    "credential-store": "credential store",
    "system-secret": "system secret",
    "deny-read": "deny_read",
    "store": "Stockade's store",
    "socket": "host socket",
    "private-data": "private data",
}


def _hidden_paths(items: Iterable[HiddenPath]) -> tuple[HiddenPath, ...]:
    return tuple(items)


@frozen
class SandboxFacts:
    """How a command was confined.

    Attributes:
        provider: the sandbox provider's name (``none`` when unconfined).
        mode: the mode the command ran under.
        enforcement: ``full`` or ``partial``; ``None`` under ``danger-full-access``.
        denied: the run failed in a way the provider attributes to its own denial.
        runner_failed: the sandbox runner failed and the command never ran.
        stale: with ``runner_failed``, a hint: the runner's refusal names a path it was to
            mount that is gone now (the host changed between confine and start), so the same
            command asked again may run. Nothing is run again by itself: a command can write
            the same words.
        missing: what ``partial`` enforcement leaves out (empty when ``full``).
        hidden: arguments of a failed run that name a path the sandbox hides (each also
            sets ``denied``); empty when the run succeeded.
        writes: how a writing command's files reach its writable roots: ``layered`` (into
            a layer of its own, landed by the host after its checks: :mod:`stockade.layers`)
            or ``direct`` (into the real folders, protected names quarantined after it);
            ``None`` when it writes nothing there (``read-only``) or runs unconfined.
        protection: how the protected paths of the writable roots were kept, when the
            provider says: ``read-only`` while the command ran, or ``put-back`` by the host
            after it (Landlock without its supervisor); ``None`` when none were surveyed.
    """

    provider: str
    mode: Mode
    enforcement: Enforcement | None = field(kw_only=True, default=None)
    denied: bool = field(kw_only=True, default=False)
    runner_failed: bool = field(kw_only=True, default=False)
    stale: bool = field(kw_only=True, default=False)
    missing: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    hidden: tuple[HiddenPath, ...] = field(kw_only=True, default=(), converter=_hidden_paths)
    writes: Writes | None = field(kw_only=True, default=None)
    protection: Protection | None = field(kw_only=True, default=None)


@frozen
class Probe:
    """Whether a backend works on this machine, and why not.

    Attributes:
        usable: the backend can run commands here.
        detail: what was checked, or what is missing and how to fix it.
    """

    usable: bool
    detail: str


@frozen
class LaunchPlan:
    """What an executor runs: the sandbox provider's translation of a spec.

    Attributes:
        executable: the path passed to ``execve`` (a sandbox runner, or the program).
        argv: the full argv, with any runner prefix.
        cwd: the working directory for the process.
        env: the complete environment of the process, credentials included.
        stdin: bytes for stdin (empty: ``/dev/null``).
        timeout: seconds before the process group is terminated.
        kill_grace: seconds between SIGTERM and SIGKILL.
        output_limit: bytes of each stream kept in memory.
        limits: resource limits the executor must enforce, or refuse.
        pass_fds: descriptors the runner needs inherited (a seccomp filter, ...).
        facts: how the provider confines this plan.
        runner: the executable is a sandbox runner that starts the command as a descendant
            in a session of its own. The grace signal (SIGTERM on timeout or abort) then goes
            to the runner's descendants, not to the runner, whose death would tear the
            sandbox down at once.
        new_session: start the process in a session of its own (``setsid``), with no
            controlling terminal; it still leads the process group the executor kills.
        restrict: called, with no arguments, on a fresh thread that then spawns the process
            and ends. For providers that confine the spawning thread itself (Landlock,
            seccomp, ``no_new_privs``): what it restricts, the process inherits, and the
            host's other threads are untouched. It must restrict only the calling thread.
        on_output: called by the executor with each chunk it reads, as
            ``on_output("stdout" | "stderr", chunk)``, from the thread that runs the plan,
            while the command runs (a background task's live output). It must not block.
        protection: the protected paths the provider found in the writable roots before
            the run, and whether it keeps them read-only itself; the host looks again after
            the run (:mod:`stockade.run.guard`). ``None``: the host surveys them itself.
        layers: the command's layers, one per writable root, when it writes into layers
            (:mod:`stockade.layers`): the host lands them once it has ended, in place of the
            check after the run. Empty: it writes directly.
    """

    executable: str
    argv: tuple[str, ...] = field(converter=_strings)
    cwd: str = field(kw_only=True)
    env: Mapping[str, str] = field(kw_only=True, converter=_frozen_map)
    stdin: bytes = field(kw_only=True, default=b"")
    timeout: float = field(kw_only=True)
    kill_grace: float = field(kw_only=True)
    output_limit: int = field(kw_only=True)
    limits: Limits = field(kw_only=True, factory=Limits)
    pass_fds: tuple[int, ...] = field(kw_only=True, default=(), converter=_ints)
    facts: SandboxFacts = field(kw_only=True)
    runner: bool = field(kw_only=True, default=False)
    new_session: bool = field(kw_only=True, default=False)
    restrict: Callable[[], None] | None = field(kw_only=True, default=None, eq=False)
    on_output: Callable[[str, bytes], None] | None = field(kw_only=True, default=None, eq=False)
    protection: Survey | None = field(kw_only=True, default=None, eq=False)
    layers: tuple[Layer, ...] = field(kw_only=True, default=(), eq=False)

    @classmethod
    def from_spec(cls, spec: ExecSpec, facts: SandboxFacts, **changes: Any) -> LaunchPlan:  # noqa: ANN401 - any field
        """The plan that runs ``spec`` as it is, with ``changes`` (a runner prefix, ...)."""
        fields: dict[str, Any] = {
            "executable": spec.program,
            "argv": spec.argv,
            "cwd": spec.cwd,
            "env": spec.env,
            "stdin": spec.stdin,
            "timeout": spec.timeout,
            "kill_grace": spec.kill_grace,
            "output_limit": spec.output_limit,
            "limits": spec.limits,
            "facts": facts,
        }
        fields.update(changes)
        return cls(**fields)
