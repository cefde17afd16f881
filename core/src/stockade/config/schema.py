"""Configuration: the values, their defaults, and where the file is looked for.

Inputs are parameters (``load_config(path, environ=...)``) so tests pass dicts instead of
patching the process. The file is only parsed when one exists: a machine with no config pays
nothing for the schema machinery. A ``stockade.toml`` in the working directory is never read
on its own, since an agent can write there; name it with ``--config`` or ``STOCKADE_CONFIG``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from attrs import Attribute, field, frozen

from ..errors import ConfigError
from ..request.literals import MODES, Mode
from ..request.spec import Limits, Profile
from .dirs import state_dir


def _positive(_inst: object, attr: Attribute[Any], value: float) -> None:
    if value <= 0:
        raise ValueError(f"{attr.name} must be greater than 0, got {value!r}")


def _patterns(_inst: object, _attr: object, value: tuple[str, ...]) -> None:
    import re

    for pattern in value:
        try:
            re.compile(pattern)
        except re.error as error:
            message = f"redact pattern {pattern!r} is not a regular expression: {error}"
            raise ValueError(message) from None
        if re.compile(pattern).search(""):
            raise ValueError(f"redact pattern {pattern!r} matches the empty string")


def _absolute(_inst: object, _attr: object, value: tuple[str, ...]) -> None:
    for path in value:
        if not os.path.isabs(path):
            raise ValueError(f"system_secrets entry {path!r} is not an absolute path or glob")


def _mode(_inst: object, _attr: object, value: str) -> None:
    if value not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {value!r}")


@frozen
class TimeoutConfig:
    """Time bounds, in seconds.

    Attributes:
        default: applied when a request names no timeout.
        max: the cap; a longer request is cut to it (and the result says so).
        kill_grace: between SIGTERM and SIGKILL when the timeout fires.
    """

    default: float = field(default=30.0, validator=_positive)
    max: float = field(default=600.0, validator=_positive)
    kill_grace: float = field(default=2.0, validator=_positive)

    def __attrs_post_init__(self) -> None:
        if self.default > self.max:
            raise ValueError(f"default ({self.default}) is above max ({self.max})")


@frozen
class OutputConfig:
    """Output bounds.

    Attributes:
        limit: bytes of each stream kept in memory (head and tail); the rest is spilled.
        spill_dir: where the private spill directories are made (the temp dir by default).
    """

    limit: int = field(default=1024 * 1024, validator=_positive)
    spill_dir: str | None = None


@frozen
class PluginsConfig:
    """Which plugins load, and their settings.

    Attributes:
        disable: plugin names never loaded (added to ``STOCKADE_DISABLE_PLUGINS``).
        settings: per-plugin tables, handed to the executor or provider of that name.
    """

    disable: tuple[str, ...] = ()
    settings: Mapping[str, Mapping[str, Any]] = field(factory=dict)


@frozen
class EnvConfig:
    """The child environment.

    Attributes:
        allow: extra ambient variable names passed through (secret-looking names never are).
    """

    allow: tuple[str, ...] = ()


@frozen
class CredentialsConfig:
    """Where the built-in credential broker finds a secret by its handle.

    Attributes:
        env_prefix: the host's environment variable ``PREFIX + HANDLE`` (upper-cased, ``-``
            and ``.`` as ``_``) holds the secret; empty turns this source off.
        file: an owner-only TOML file of ``handle = "secret"`` lines (none by default).
    """

    env_prefix: str = "STOCKADE_SECRET_"
    file: str | None = None


@frozen
class NetworkConfig:
    """The egress proxy.

    Attributes:
        resolve: a hosts map the proxy consults before DNS (name -> IP address); a name in
            it counts as explicitly named, so it may resolve to a loopback address.
        upstream_ca: for tests only: a PEM file of CA certificates the proxy trusts, besides
            the system's, when it opens its own TLS connection to a host it injects a
            credential into (a local test upstream); leave it unset in real use.
    """

    resolve: Mapping[str, str] = field(factory=dict)
    upstream_ca: str | None = None


@frozen
class StoreConfig:
    """The embedded store: held approvals now, the audit record with it.

    Attributes:
        path: the SQLite file (``$XDG_STATE_HOME/stockade/store.db`` by default); the
            signing key, the head and the output blobs sit beside it.
        fail_closed: when recording fails, refuse every command until the store works
            again (the default); ``false`` runs them unrecorded, with a warning.
        redact: regular expressions whose matches never reach the record: in argv, the
            working directory, error messages and output (matched line by line), each match
            is kept as ``[redacted]``.
    """

    path: str | None = None
    fail_closed: bool = True
    redact: tuple[str, ...] = field(default=(), validator=_patterns)


@frozen
class SkillsConfig:
    """Agent Skills, for the ``stockade-skills`` plugin (``[skills]``).

    Attributes:
        project: folders of project skills, relative to the agent's workspace (the working
            directory for ``default``); a project skill wins over a user one of its name.
        user: folders of the user's skills (``~`` expanded); ``$XDG_CONFIG_HOME/stockade/skills``
            when unset.
        safe_mode: the global safety. While it is on, no skill's script runs; turned off
            (here, or with ``stockade skill run --unsafe``), a skill that itself declares
            ``safe_mode: false`` may run its scripts, still through the policy and the
            sandbox: the double-safety gate.
        max_chars: how much text one call of the skill tool returns when it names no bound.
    """

    project: tuple[str, ...] = (".agents/skills",)
    user: tuple[str, ...] | None = None
    safe_mode: bool = True
    max_chars: int = field(default=20_000, validator=_positive)


@frozen
class Config:
    """Everything configurable, with the embedded defaults.

    Attributes:
        executor: the executor plugin to run commands with.
        sandbox: a sandbox provider name, or ``auto`` for the strongest usable one.
        mode: the mode when a request names none.
        timeout: time bounds.
        output: output bounds.
        plugins: plugin selection and settings.
        env: environment passing.
        limits: resource limits for every command (a request's ``memory_mb`` wins).
        agents: agent profiles by name (``[agents.NAME]``); ``default`` applies when a
            request names none, with the built-in defaults when it is not configured.
        store: where held approvals are kept.
        credentials: where the built-in broker finds secrets.
        network: the egress proxy's settings.
        skills: where Agent Skills are found, and the global safety of their scripts.
        system_secrets: more absolute paths or globs masked (unreadable) in every confined
            mode, added to :data:`stockade.confine.system_secrets.SYSTEM_SECRETS`; globs are
            expanded when each command is confined.
        source: the file this was read from, if any (not a key in the file).
    """

    executor: str = "local"
    sandbox: str = "auto"
    mode: Mode = field(default="workspace-write", validator=_mode)
    timeout: TimeoutConfig = field(factory=TimeoutConfig)
    output: OutputConfig = field(factory=OutputConfig)
    plugins: PluginsConfig = field(factory=PluginsConfig)
    env: EnvConfig = field(factory=EnvConfig)
    limits: Limits = field(factory=Limits)
    agents: Mapping[str, Profile] = field(factory=dict)
    store: StoreConfig = field(factory=StoreConfig)
    credentials: CredentialsConfig = field(factory=CredentialsConfig)
    network: NetworkConfig = field(factory=NetworkConfig)
    skills: SkillsConfig = field(factory=SkillsConfig)
    system_secrets: tuple[str, ...] = field(default=(), validator=_absolute)
    source: str | None = field(default=None, kw_only=True)

    @property
    def named(self) -> str:
        """The config as a hint names it: its file, or where to make one."""
        if self.source:
            return f"the config {self.source}"
        return (
            "a config file (none was read: make ~/.config/stockade/config.toml, or pass "
            "--config or STOCKADE_CONFIG)"
        )

    def profile(self, name: str) -> Profile:
        """The profile called ``name``; ``default`` is built in when not configured.

        Raises:
            ConfigError: no profile of that name is configured.
        """
        found = self.agents.get(name)
        if found is not None:
            return found
        if name == "default":
            return Profile()
        names = ", ".join(sorted(self.agents)) or "none"
        raise ConfigError(
            f"unknown agent profile {name!r}; configured: {names}",
            hint=f"add [agents.{name}] to {self.named}, or name a configured profile",
            details={"profile": name, "configured": sorted(self.agents)},
        )


def store_folder(config: Config) -> str:
    """The folder of the store: where the record, held steps, workspaces and locks live.

    It is the host process's own (its ``XDG_STATE_HOME`` or ``HOME``), whatever
    environment a host hands its children.
    """
    if config.store.path:
        return os.path.dirname(os.path.abspath(os.path.expanduser(config.store.path)))
    return state_dir(os.environ)
