"""The values that travel along the path of one command, from request to result.

All are frozen attrs classes; the wire format (JSON, config) is built in
:mod:`stockade.request.wire`.
Orthogonal outcomes stay separate fields: a run can time out *and* exit 0.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import attrs
from attrs import field, frozen

from .checks import (
    _argv,
    _check_argv,
    _dotfiles,
    _frozen_map,
    _kinds,
    _one_of,
    _paths,
    _positive,
    _positive_number,
    _private_globs,
    _strings,
)
from .literals import (
    AUTONOMIES,
    BREAKER_SETTINGS,
    COMMITS,
    MODES,
    ORIGINS,
    Autonomy,
    BreakerSetting,
    Commit,
    Kind,
    Mode,
    Origin,
)
from .verdict import Decision


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
        read_private: grant this one command the private paths (the profile's ``private``
            globs, the files the sidecar marks), hidden from it otherwise; its run then holds
            private data.
        workspace: for a profile with no workspace of its own (a person's ``default``), the
            folder that bounds the command instead of ``cwd`` (which must lie inside it); a
            profile's own workspace always wins, and naming another one is refused.
        dry_run: run it in layers and land nothing: the result's ``changes`` says what it
            would have changed (refused where the sandbox cannot layer its writes).
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
    read_private: bool = field(kw_only=True, default=False)
    workspace: str | None = field(kw_only=True, default=None)
    dry_run: bool = field(kw_only=True, default=False)
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
        ca_bundle: the run's trust bundle (the system's and the run's own authority), for a
            proxy that injects credentials: the sandbox makes it readable and points the
            command's CA variables at it.
    """

    hosts: tuple[str, ...] = field(converter=_strings)
    socket: str = field(kw_only=True)
    port: int = field(kw_only=True)
    ca_bundle: str | None = field(kw_only=True, default=None)


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
        read_private: the request asked for the private paths (``--read-private``).
        private_data: resolved paths of private data the sandbox must hide from this
            command (:mod:`stockade.policy.private`): empty when it is granted them.
        system_secrets: more system secrets a sandbox must mask besides the built-in
            :data:`stockade.confine.system_secrets.SYSTEM_SECRETS` (the ``system_secrets``
            config key: paths or globs, expanded when the command is confined).
        egress: for a ``network`` command whose profile names hosts, the proxy it may reach;
            ``None`` (no network at all) for every other command.
        home: an agent's run home (``HOME``): fresh for each run, writable in every mode,
            removed when the run ends; ``None`` for a person's own profile.
        caches: an agent's package caches, kept between runs: writable in
            ``workspace-write``, read-only otherwise.
        writable_dotfiles: protected dotfiles its profile lets it write (``*``: all).
        layer_store: the store folder where a provider that can (bubblewrap) keeps the
            command's layers (:mod:`stockade.layers`); ``None``: it writes directly.
        commit: when its layers land: ``always``, ``on-success`` (exit 0, not stopped),
            ``ask`` (when a person lets them) or ``never`` (``--dry-run``: the result
            lists what would have changed).
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
    read_private: bool = field(kw_only=True, default=False)
    private_data: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    system_secrets: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    egress: Egress | None = field(kw_only=True, default=None)
    home: str | None = field(kw_only=True, default=None)
    caches: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    writable_dotfiles: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    layer_store: str | None = field(kw_only=True, default=None)
    commit: Commit = field(kw_only=True, default="always")


@frozen
class Budget:
    """How much one run of an agent may do; past it, every command is denied.

    Attributes:
        steps: commands per run (each one asked counts, whatever was decided).
        duration: seconds from the run's first step.
    """

    steps: int | None = field(kw_only=True, default=None, validator=_positive)
    duration: float | None = field(kw_only=True, default=None, validator=_positive_number)


_NOT_INJECTED = frozenset(
    ("host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer")
)


def _header_name(_inst: object, _attr: object, value: str) -> None:
    import re

    if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", value):
        raise ValueError(f"header {value!r} is not an HTTP field name")
    if value.lower() in _NOT_INJECTED or value.lower().startswith("proxy-"):
        raise ValueError(f"header {value!r} frames or routes the request; it cannot carry one")


def _env_name(_inst: object, _attr: object, value: str | None) -> None:
    import re

    if value is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError(f"env {value!r} is not an environment variable name")


def _header_text(_inst: object, attr: attrs.Attribute[str | None], value: str | None) -> None:
    if value is not None and any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise ValueError(f"{attr.name} {value!r} holds a control character")


@frozen
class CredentialBinding:
    """Where the egress proxy puts a credential for the command, which holds a placeholder.

    A profile binds a handle (``[agents.NAME.credentials] github = {host = ...}``); a
    command that asks for that handle gets a random placeholder in its variable, and the
    proxy, which terminates TLS for ``host`` only, replaces the placeholder with the value
    in the ``header`` of requests to ``host``.

    Attributes:
        host: ``name`` or ``name:port`` (443 when none), covered by the profile's ``hosts``.
        header: the request header the value goes in.
        format: how the header's value is written, ``{}`` standing for the secret
            (``"Bearer {}"`` when neither this nor ``username`` is given).
        username: for HTTP basic auth (git over HTTPS): the header becomes ``Basic
            base64(username:secret)``.
        env: a variable every command of the profile gets, holding the placeholder, without
            naming the handle (an agent over MCP cannot name one); ``None``: only a command
            that asks for the handle gets it.
    """

    host: str
    header: str = field(kw_only=True, default="Authorization", validator=_header_name)
    format: str | None = field(kw_only=True, default=None, validator=_header_text)
    username: str | None = field(kw_only=True, default=None, validator=_header_text)
    env: str | None = field(kw_only=True, default=None, validator=_env_name)

    def __attrs_post_init__(self) -> None:
        if self.username is not None and self.format is not None:
            raise ValueError("give format or username (basic auth), not both")
        if self.format is not None and self.format.count("{}") != 1:
            raise ValueError(f"format {self.format!r} must hold '{{}}' exactly once")
        if self.username is not None and (":" in self.username or not self.username):
            raise ValueError(f"username {self.username!r} must be non-empty, without ':'")

    def render(self, secret: str) -> str:
        """The header's value, the secret in place."""
        if self.username is not None:
            import base64

            raw = f"{self.username}:{secret}".encode()
            return "Basic " + base64.b64encode(raw).decode("ascii")
        return (self.format or "Bearer {}").replace("{}", secret)


def _bindings(value: Mapping[str, CredentialBinding]) -> Mapping[str, CredentialBinding]:
    from types import MappingProxyType

    return MappingProxyType(dict(value))


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
            :data:`stockade.confine.protected.DOTFILES`) its commands may write in a writable root,
            ``["*"]`` for all of them (a dotfiles checkout).
        credentials: handle -> where the egress proxy injects it; the command holds only
            a placeholder (:class:`CredentialBinding`).
        private: globs naming its private paths (relative to the workspace root, or
            absolute): hidden from every step not granted them, and a run whose step is
            granted them holds private data (:mod:`stockade.policy.private`).
        private_readers: programs (names or absolute paths) whose steps are granted the
            private paths (and so taint their run), as ``--read-private`` grants one step.
        commit: when a command's layers land (:mod:`stockade.layers`): ``always``,
            ``on-success`` (a command that failed, timed out or was stopped lands nothing;
            the result says ``landed = "discarded"``) or ``ask`` (a person sees the change
            list and lets it land or not, :mod:`stockade.policy.landing`).
        breaker: ``on``; ``off-allow-exfiltration`` lets a run that holds private data and
            somebody else's words reach the network without asking a person.
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
    credentials: Mapping[str, CredentialBinding] = field(
        kw_only=True, factory=dict, converter=_bindings
    )
    private: tuple[str, ...] = field(
        kw_only=True, default=(), converter=_strings, validator=_private_globs
    )
    private_readers: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    breaker: BreakerSetting = field(kw_only=True, default="on", validator=_one_of(BREAKER_SETTINGS))
    commit: Commit = field(kw_only=True, default="always", validator=_one_of(COMMITS))
