"""The values that travel along the path of one command, from request to result.

All are frozen attrs classes; the wire format (JSON, config) is built in :mod:`stockade.wire`.
Orthogonal outcomes stay separate fields: a run can time out *and* exit 0.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import attrs
from attrs import field, frozen

if TYPE_CHECKING:
    from .guard import Guarded
    from .protected import Survey

Mode = Literal["read-only", "workspace-write", "danger-full-access"]
Kind = Literal["reads", "writes", "network", "destroys"]
Verdict = Literal["allow", "ask", "deny"]
Origin = Literal["cli", "api", "mcp"]
Autonomy = Literal["standard", "read-only"]
Enforcement = Literal["full", "partial"]
LimitName = Literal["memory", "processes", "file_size", "cpu", "quota"]
ChangeMethod = Literal["inotify", "scan"]
HiddenKind = Literal["private", "credential-store", "system-secret", "deny-read", "store", "socket"]

ClassifierRule = Callable[[Sequence[str]], "tuple[Kind, str]"]
"""``rule(args)``: the class of a program's command and why, from the arguments after it."""

MODES: tuple[Mode, ...] = ("read-only", "workspace-write", "danger-full-access")
KINDS: tuple[Kind, ...] = ("reads", "writes", "network", "destroys")
"""Classes of effect, least severe first: the order in which votes are ranked."""
ORIGINS: tuple[Origin, ...] = ("cli", "api", "mcp")
AUTONOMIES: tuple[Autonomy, ...] = ("standard", "read-only")


def _frozen_map(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


def _argv(value: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError("argv must be a sequence of strings, not one string: no shell parses it")
    return tuple(value)


def _check_argv(_inst: object, _attr: object, value: tuple[str, ...]) -> None:
    if not value:
        raise ValueError("argv is empty: name a program")
    for arg in value:
        if not isinstance(arg, str):
            raise TypeError(f"argv items must be strings, got {type(arg).__name__}")
        if "\0" in arg:
            raise ValueError("argv items cannot contain NUL bytes")
    if not value[0]:
        raise ValueError("argv[0] is empty: name a program")


def _paths(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError("grant_writable takes a list of folders, not one string")
    return tuple(value)


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _ints(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(value)


def _one_of(choices: tuple[str, ...]) -> Callable[[Any, Any, Any], None]:
    def check(_inst: object, attr: object, value: str | None) -> None:
        if value is not None and value not in choices:
            name = getattr(attr, "name", "value")
            raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")

    return check


def _positive(_instance: object, attr: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{attr.name} must be a whole number >= 1, got {value!r}")


def new_action_id() -> str:
    """A random identifier pairing the events of one command."""
    return os.urandom(8).hex()


def new_run_id() -> str:
    """A random identifier for one run: the steps one host (one agent session) takes."""
    return "r" + os.urandom(6).hex()


@frozen
class Limits:
    """Resource limits for one command and everything it starts (``None``: no limit).

    Attributes:
        memory_mb: address space per process, in MiB (``RLIMIT_AS``).
        processes: processes the command may have at once (``RLIMIT_NPROC``; the kernel
            counts them per user, and exempts root).
        file_size_mb: the largest file the command may write, in MiB (``RLIMIT_FSIZE``).
        cpu_seconds: CPU time per process, in seconds (``RLIMIT_CPU``).
    """

    memory_mb: int | None = field(kw_only=True, default=None, validator=_positive)
    processes: int | None = field(kw_only=True, default=None, validator=_positive)
    file_size_mb: int | None = field(kw_only=True, default=None, validator=_positive)
    cpu_seconds: int | None = field(kw_only=True, default=None, validator=_positive)

    def any(self) -> bool:
        """Whether any limit is set."""
        return any(v is not None for v in attrs.astuple(self))


def _gate_verdict(_inst: object, _attr: object, value: Decision | None) -> None:
    if value is not None and value.verdict == "ask":
        raise ValueError("a gate allows or denies; asking a person is the policy's to do")


@frozen
class ExecRequest:
    """What a caller asks for. Unset fields are filled from configuration by the host.

    Attributes:
        argv: the program and its arguments, passed literally (never through a shell).
        cwd: working directory; the caller's current directory when unset.
        env: entries the caller names explicitly; they win over the scrub.
        stdin: bytes written to the command's stdin, then closed; empty when unset.
        timeout: seconds before the process group is terminated; config default when unset.
        mode: ``read-only``, ``workspace-write`` or ``danger-full-access``.
        sandbox: a sandbox provider name, or ``auto`` for the strongest usable one.
        memory_mb: a memory limit in MiB, refused by backends that cannot enforce it.
        credentials: environment variable name -> credential handle, resolved by a broker.
        origin: who typed the command: ``cli`` (a person), ``api`` or ``mcp`` (an agent).
        profile: the agent profile whose policy applies.
        preapproved: a person approved in advance what would otherwise ask (``--yes``).
        grant_writable: folders to make writable for this one command beyond its workspace:
            a one-shot widening that always waits for a person and is recorded on its own.
        workspace: for a profile with no workspace of its own (a person's ``default``), the
            folder that bounds the command instead of ``cwd`` (which must lie inside it); a
            profile's own workspace always wins, and naming another one is refused.
        gate: the decision of a caller's own gate in front of the policy (the skills
            plugin's double-safety gate): recorded as the command's first permission event;
            ``deny`` refuses the command there, ``allow`` leaves the policy to decide. Set
            in code only: a request read from the wire cannot carry one.
    """

    argv: tuple[str, ...] = field(converter=_argv, validator=_check_argv)
    cwd: str | None = None
    env: Mapping[str, str] = field(kw_only=True, factory=dict, converter=_frozen_map)
    stdin: bytes | None = field(kw_only=True, default=None)
    timeout: float | None = field(kw_only=True, default=None)
    mode: Mode | None = field(kw_only=True, default=None, validator=_one_of(MODES))
    sandbox: str | None = field(kw_only=True, default=None)
    memory_mb: int | None = field(kw_only=True, default=None)
    credentials: Mapping[str, str] = field(kw_only=True, factory=dict, converter=_frozen_map)
    origin: Origin = field(kw_only=True, default="api", validator=_one_of(ORIGINS))
    profile: str = field(kw_only=True, default="default")
    preapproved: bool = field(kw_only=True, default=False)
    grant_writable: tuple[str, ...] = field(kw_only=True, default=(), converter=_paths)
    workspace: str | None = field(kw_only=True, default=None)
    gate: Decision | None = field(kw_only=True, default=None, validator=_gate_verdict)

    @classmethod
    def from_argv(cls, argv: Sequence[str], **fields: object) -> ExecRequest:
        """Build a request from an argv list and keyword fields."""
        return cls(argv, **fields)  # type: ignore[arg-type]


@frozen
class Egress:
    """A ``network`` command's only way out: the egress proxy the host runs for it.

    Attributes:
        hosts: the ``host[:port]`` entries the proxy lets through (the profile's ``hosts``).
        socket: the proxy's Unix socket on the host (bubblewrap binds it in).
        port: the proxy's TCP port on the host's loopback (Landlock allows connecting to it).
    """

    hosts: tuple[str, ...] = field(converter=_strings)
    socket: str = field(kw_only=True)
    port: int = field(kw_only=True)


@frozen
class ExecSpec:
    """The fully resolved command: every field explicit, nothing implicit downstream.

    Attributes:
        action_id: pairs every event recorded for this command.
        argv: the argv as requested; ``argv[0]`` is the name the caller used.
        program: the absolute path of the executable that ``argv[0]`` resolved to.
        cwd: the absolute working directory, known to exist.
        workspace: the folder ``workspace-write`` makes writable: the agent profile's
            workspace (``cwd`` lies inside it), else ``cwd`` itself.
        env: the complete environment of the child, before credentials are added.
        stdin: bytes for stdin (empty: stdin is ``/dev/null``).
        timeout: the effective timeout in seconds, after defaulting and capping.
        kill_grace: seconds between SIGTERM and SIGKILL when the timeout fires.
        mode: the effective sandbox mode.
        sandbox: the provider name asked for (``auto`` lets the host pick).
        output_limit: bytes of each stream kept in memory; the rest is spilled.
        limits: the resource limits, from the request and configuration.
        credentials: environment variable name -> handle, resolved at spawn time.
        origin: who typed the command.
        profile: the agent profile whose policy applies.
        preapproved: whether a person approved in advance what would ask.
        run_id: the run this command is a step of.
        step: its number in the run, from 1.
        run_elapsed: seconds since the run's first step began (for duration budgets).
        grant_writable: resolved folders writable for this command only, by a person's grant.
        hidden: folders a sandbox must make unreadable: Stockade's own state (the record,
            its signing key, the held steps).
        system_secrets: more system secrets a sandbox must mask besides the built-in
            :data:`stockade.system_secrets.SYSTEM_SECRETS` (the ``system_secrets`` config key:
            paths or globs, expanded when the command is confined).
        egress: for a ``network`` command whose profile names hosts, the proxy it may reach;
            ``None`` (no network at all) for every other command.
        home: an agent's run home (``HOME``): fresh for each run, writable in every mode,
            removed when the run ends; ``None`` for a person's own profile.
        caches: an agent's package caches, kept between runs: writable in
            ``workspace-write``, read-only otherwise.
        writable_dotfiles: protected dotfiles its profile lets it write (``*``: all).
    """

    action_id: str
    argv: tuple[str, ...]
    program: str = field(kw_only=True)
    cwd: str = field(kw_only=True)
    workspace: str = field(kw_only=True, default=attrs.Factory(lambda s: s.cwd, takes_self=True))
    env: Mapping[str, str] = field(kw_only=True, converter=_frozen_map)
    stdin: bytes = field(kw_only=True)
    timeout: float = field(kw_only=True)
    kill_grace: float = field(kw_only=True)
    mode: Mode = field(kw_only=True)
    sandbox: str = field(kw_only=True)
    output_limit: int = field(kw_only=True)
    limits: Limits = field(kw_only=True, factory=Limits)
    credentials: Mapping[str, str] = field(kw_only=True, factory=dict, converter=_frozen_map)
    origin: Origin = field(kw_only=True, default="api")
    profile: str = field(kw_only=True, default="default")
    preapproved: bool = field(kw_only=True, default=False)
    run_id: str = field(kw_only=True, default="")
    step: int = field(kw_only=True, default=0)
    run_elapsed: float = field(kw_only=True, default=0.0)
    grant_writable: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    hidden: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    system_secrets: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    egress: Egress | None = field(kw_only=True, default=None)
    home: str | None = field(kw_only=True, default=None)
    caches: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    writable_dotfiles: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)


@frozen
class Classification:
    """What a command may affect, with the reasons the classifiers gave.

    Attributes:
        kind: ``reads`` < ``writes`` < ``network`` < ``destroys``.
        reasons: human-readable reasons, from every voter.
        by: the names of the classifiers that voted.
        programs: the programs the command would start, by name: wrappers (``env``,
            ``xargs``, ...) and what they run. A profile's ``programs`` list is checked
            against every one.
    """

    kind: Kind = field(validator=_one_of(KINDS))
    reasons: tuple[str, ...] = field(default=(), converter=_strings)
    by: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    programs: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)

    @property
    def severity(self) -> int:
        """The rank of :attr:`kind`: 0 for ``reads`` up to 3 for ``destroys``."""
        return KINDS.index(self.kind)


def _kinds(_inst: object, attr: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    for kind in value:
        if kind not in KINDS:
            raise ValueError(f"{attr.name} takes classes from {', '.join(KINDS)}; got {kind!r}")


def _dotfiles(_inst: object, attr: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    from .protected import DOTFILES

    for name in value:
        if name != "*" and name not in DOTFILES:
            raise ValueError(
                f"{attr.name} takes protected dotfiles ({', '.join(sorted(DOTFILES))}) or "
                f"'*'; got {name!r}"
            )


def _positive_number(
    _inst: object, attr: attrs.Attribute[float | None], value: float | None
) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{attr.name} must be greater than 0, got {value!r}")


@frozen
class Budget:
    """How much one run of an agent may do; past it, every command is denied.

    Attributes:
        steps: commands per run (each one asked counts, whatever was decided).
        duration: seconds from the run's first step.
    """

    steps: int | None = field(kw_only=True, default=None, validator=_positive)
    duration: float | None = field(kw_only=True, default=None, validator=_positive_number)


@frozen
class Profile:
    """An agent profile (``[agents.NAME]`` in the config): what that agent may do.

    Attributes:
        name: the profile's name (the table's key; ``default`` when a request names none).
        programs: the only programs it may run, by name; ``None`` for any program.
        ask: the classes that wait for a person; ``destroys`` always waits.
        hosts: the hosts a ``network`` command may reach (through the egress proxy).
        workspace: the folder its commands run in and may not leave (``None``: a folder of
            its own under the store; the cwd for ``default``).
        timeout: its default timeout in seconds (capped by ``timeout.max``).
        memory_mb: its memory limit (a request may ask for less, never more).
        quota_mb: the size its workspace may reach.
        autonomy: ``read-only`` agents (and evaluation runs) get only ``reads`` commands.
        budget: steps and duration per run.
        writable_dotfiles: protected dotfiles (``.bashrc``, ``.gitconfig``, ...; see
            :data:`stockade.protected.DOTFILES`) its commands may write in a writable root,
            ``["*"]`` for all of them (a dotfiles checkout).
    """

    name: str = field(default="default", kw_only=True)
    programs: tuple[str, ...] | None = field(kw_only=True, default=None)
    ask: tuple[Kind, ...] = field(kw_only=True, default=("network",), validator=_kinds)
    hosts: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    workspace: str | None = field(kw_only=True, default=None)
    timeout: float | None = field(kw_only=True, default=None, validator=_positive_number)
    memory_mb: int | None = field(kw_only=True, default=None, validator=_positive)
    quota_mb: int | None = field(kw_only=True, default=None, validator=_positive)
    autonomy: Autonomy = field(kw_only=True, default="standard", validator=_one_of(AUTONOMIES))
    budget: Budget = field(kw_only=True, factory=Budget)
    writable_dotfiles: tuple[str, ...] = field(
        kw_only=True, default=(), converter=_strings, validator=_dotfiles
    )


@frozen
class Decision:
    """Whether a command may run.

    Attributes:
        verdict: ``allow``, ``ask`` (a person must answer) or ``deny``.
        reason: why, in one sentence a person can act on.
        by: who decided: a policy plugin, a person, or ``preapproved``.
    """

    verdict: Verdict = field(validator=_one_of(("allow", "ask", "deny")))
    reason: str
    by: str = field(kw_only=True, default="")


@frozen
class PendingApproval:
    """A command waiting for a person: exactly what would run, and why it is held.

    Attributes:
        spec: the resolved command (its ``run_id`` and ``step`` name it).
        classification: what it may affect.
        decision: the ``ask`` decision that held it.
    """

    spec: ExecSpec
    classification: Classification
    decision: Decision


@frozen
class HiddenPath:
    """A path the sandbox hides from a command, and what hides it.

    Attributes:
        path: the path as the command names it (its program, an argument).
        folder: the hidden folder (or file) it lies in, resolved.
        kind: what hides it: ``private`` (the host's ``/tmp``, ``/var/tmp``, ``/run``,
            ``/dev/shm`` or a home's ``.cache``: the sandbox has its own), ``credential-store``,
            ``system-secret``, ``deny-read``, ``store`` (Stockade's own state) or ``socket``.
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
        missing: what ``partial`` enforcement leaves out (empty when ``full``).
        hidden: arguments of a failed run that name a path the sandbox hides (each also
            sets ``denied``); empty when the run succeeded.
    """

    provider: str
    mode: Mode
    enforcement: Enforcement | None = field(kw_only=True, default=None)
    denied: bool = field(kw_only=True, default=False)
    runner_failed: bool = field(kw_only=True, default=False)
    missing: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    hidden: tuple[HiddenPath, ...] = field(kw_only=True, default=(), converter=_hidden_paths)


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
            the run (:mod:`stockade.guard`). ``None``: the host surveys them itself.
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


@frozen
class CollectedOutput:
    """One captured stream: the kept text plus what is needed to recover the rest.

    Attributes:
        text: the stream decoded as UTF-8; when truncated, head and tail with the middle marked.
        truncated: bytes were dropped from :attr:`text`.
        total_bytes: the length of the whole stream.
        sha256: hex digest of the whole stream.
        spill_path: a private file holding the whole stream, when truncated.
    """

    text: str
    truncated: bool
    total_bytes: int = field(kw_only=True)
    sha256: str = field(kw_only=True)
    spill_path: str | None = field(kw_only=True, default=None)


@frozen
class ProcessOutcome:
    """What an executor observed: how the process ended and what it printed.

    Attributes:
        exit_code: the exit status; ``None`` when a signal killed the process.
        signal: the name of the signal that killed it (``SIGKILL``), or ``None``.
        timed_out: the executor's timeout fired.
        aborted: the caller cancelled the run.
        duration: seconds from spawn to exit.
        stdout: the captured standard output.
        stderr: the captured standard error.
        limit_hit: the resource limit that most likely ended the run, if one did.
        guarded: what the host's check after the run quarantined and restored, when it
            did anything (:mod:`stockade.guard`).
    """

    exit_code: int | None
    signal: str | None
    timed_out: bool = field(kw_only=True)
    aborted: bool = field(kw_only=True)
    duration: float = field(kw_only=True)
    stdout: CollectedOutput = field(kw_only=True)
    stderr: CollectedOutput = field(kw_only=True)
    limit_hit: LimitName | None = field(kw_only=True, default=None)
    guarded: Guarded | None = field(kw_only=True, default=None)


@frozen
class Changes:
    """What changed in the workspace while a command ran, by path relative to it.

    Directories end in ``/``. A created directory lists everything in it too; a deleted
    one everything it held. Each list is sorted; together they hold at most ``limit``
    entries, and :attr:`total` always counts them all.

    Attributes:
        created: paths that did not exist before the command.
        modified: paths that existed before and after, whose content or metadata was
            written (a file replaced by a rename counts as modified).
        deleted: paths that existed before and are gone.
        total: how many entries the three lists would hold without the cap.
        truncated: entries were left out of the lists (``total`` is larger than their sum).
        method: ``inotify`` (the kernel reported every change) or ``scan`` (it could not,
            so the tree was listed again and compared; modifications are then read from
            change times).
    """

    created: tuple[str, ...] = field(default=(), converter=_strings)
    modified: tuple[str, ...] = field(default=(), converter=_strings)
    deleted: tuple[str, ...] = field(default=(), converter=_strings)
    total: int = field(kw_only=True, default=0)
    truncated: bool = field(kw_only=True, default=False)
    method: ChangeMethod = field(kw_only=True, default="inotify")


@frozen
class Refusal:
    """A connection the egress proxy refused a command, as a person needs to see it.

    Attributes:
        host: the host the command named.
        port: the port it named.
        method: ``CONNECT``, or the method of a plain HTTP request.
        reason: the rule that refused it.
    """

    host: str
    port: int
    method: str = field(kw_only=True)
    reason: str = field(kw_only=True)


@frozen
class RunResult:
    """The structured result of one command.

    Attributes:
        action_id: pairs this result with its recorded events.
        argv: the argv as requested.
        exit_code: the exit status; ``None`` when a signal killed the process.
        signal: the name of the killing signal, or ``None``.
        timed_out: Stockade's timeout fired (even if the command then exited 0).
        aborted: the caller cancelled the run.
        duration_ms: milliseconds from spawn to exit.
        timeout_s: the effective timeout that applied.
        stdout: the captured standard output.
        stderr: the captured standard error.
        sandbox: how the command was confined.
        limits: the resource limits that applied.
        limit_hit: the limit that most likely ended the run (``memory``, ``processes``,
            ``file_size``, ``cpu``), read from the signal or stderr: a hint, like ``denied``;
            ``quota`` (not a hint) when the host stopped it for taking its workspace over
            the profile's ``quota_mb``.
        classification: what the command was judged to affect.
        decision: why it was allowed.
        changes: what it created, modified and deleted in its workspace; ``None`` when
            nothing was watched (a ``read-only`` command, which cannot change it, or a
            workspace too big to watch).
        refused: the connections the egress proxy refused it (each is also a
            ``connection`` event in the record), so a person sees why a network step failed.
        cwd: the directory it ran in (an agent's own workspace, when the caller named none).
        quarantined: protected names (``.git``, agent config, dotfiles, credential stores,
            ...) the command made, or changed inside a protected path, moved out of the
            workspace into the store's quarantine after it exited.
        restored: protected paths it changed, put back as they were before it ran (under a
            sandbox that cannot keep them read-only while it runs: Landlock).
    """

    action_id: str
    argv: tuple[str, ...]
    exit_code: int | None = field(kw_only=True)
    signal: str | None = field(kw_only=True)
    timed_out: bool = field(kw_only=True)
    aborted: bool = field(kw_only=True)
    duration_ms: float = field(kw_only=True)
    timeout_s: float = field(kw_only=True)
    stdout: CollectedOutput = field(kw_only=True)
    stderr: CollectedOutput = field(kw_only=True)
    sandbox: SandboxFacts = field(kw_only=True)
    classification: Classification = field(kw_only=True)
    decision: Decision = field(kw_only=True)
    limits: Limits = field(kw_only=True, factory=Limits)
    limit_hit: LimitName | None = field(kw_only=True, default=None)
    changes: Changes | None = field(kw_only=True, default=None)
    refused: tuple[Refusal, ...] = field(kw_only=True, default=())
    cwd: str = field(kw_only=True, default="")
    quarantined: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    restored: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)

    @property
    def ok(self) -> bool:
        """The command exited 0 on its own: not signalled, timed out or aborted."""
        return self.exit_code == 0 and not (self.timed_out or self.aborted)
