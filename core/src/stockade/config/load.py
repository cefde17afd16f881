"""Reading the configuration: where the file is, parsing it, checking it against the schema."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import attrs

from ..errors import ConfigError
from ..request.wire import structure_or_problems
from .schema import Config


def config_path(environ: Mapping[str, str]) -> str | None:
    """The file to read: ``STOCKADE_CONFIG``, else the user's XDG config, else none."""
    explicit = environ.get("STOCKADE_CONFIG")
    if explicit:
        return explicit
    base = environ.get("XDG_CONFIG_HOME") or (
        os.path.join(environ["HOME"], ".config") if environ.get("HOME") else None
    )
    if base:
        candidate = os.path.join(base, "stockade", "config.toml")
        if os.path.isfile(candidate):
            return candidate
    return None


def load_config(
    path: str | None = None, *, environ: Mapping[str, str], cwd: str | None = None
) -> Config:
    """Read the configuration from ``path`` (or where :func:`config_path` finds it); a
    relative path is the caller's, under ``cwd`` (this process's folder when omitted), and
    messages name it as it was given. Relative paths *inside* the file are the file's:
    they are resolved against its folder (:func:`anchored`), whoever reads it.

    Raises:
        ConfigError: the file is missing, is not TOML, or does not match the schema; the
            message lists every bad key with its path, e.g. ``unknown key 'timout' @ $``.
    """
    path = path or config_path(environ)
    if path is None:
        return Config()
    where = os.path.join(cwd, path) if cwd else path
    try:
        with open(where, "rb") as handle:
            raw = handle.read()
    except OSError as error:
        raise ConfigError(
            f"cannot read config file {path}: {error.strerror}",
            hint="fix the path given by --config or STOCKADE_CONFIG",
        ) from None
    return anchored(parse_config(raw, source=path), os.path.dirname(os.path.abspath(where)))


def anchored(config: Config, folder: str) -> Config:
    """``config`` with each relative path it names made absolute under ``folder`` (the
    file's own): ``store.path``, ``credentials.file``, ``output.spill_dir``,
    ``network.upstream_ca`` and ``skills.user``. A path that begins with ``~`` stays as it
    is (a home is expanded where it is used); ``skills.project`` is the workspace's."""

    def at(path: str | None) -> str | None:
        if not path or os.path.isabs(path) or path.startswith("~"):
            return path
        return os.path.normpath(os.path.join(folder, path))

    user = config.skills.user
    return attrs.evolve(
        config,
        store=attrs.evolve(config.store, path=at(config.store.path)),
        credentials=attrs.evolve(config.credentials, file=at(config.credentials.file)),
        output=attrs.evolve(config.output, spill_dir=at(config.output.spill_dir)),
        network=attrs.evolve(config.network, upstream_ca=at(config.network.upstream_ca)),
        skills=attrs.evolve(
            config.skills, user=None if user is None else tuple(str(at(u)) for u in user)
        ),
    )


def parse_config(raw: bytes | str, *, source: str = "<string>") -> Config:
    """Parse TOML text into a :class:`Config`, with readable errors."""
    import tomllib

    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{source} is not valid TOML: {error}") from None
    return structure_config(data, source=source)


def structure_config(data: Mapping[str, Any], *, source: str) -> Config:
    """Build a :class:`Config` from parsed TOML.

    Raises:
        ConfigError: naming the file and every bad key with its path.
    """
    problems = ["unknown key 'source' @ $"] if "source" in data else []
    agents = data.get("agents")
    if isinstance(agents, Mapping):
        problems += _agent_problems(agents)
    config, found = structure_or_problems(data, Config)
    problems += found
    if problems or config is None:
        raise ConfigError(
            f"invalid config {source}: " + "; ".join(problems),
            hint="fix or remove those keys; see the configuration reference",
            details={"source": source, "problems": problems},
        )
    named = {name: attrs.evolve(p, name=name) for name, p in config.agents.items()}
    return attrs.evolve(config, agents=named, source=source)


_AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _agent_problems(agents: Mapping[str, Any]) -> list[str]:
    """What the schema cannot say about ``[agents.NAME]`` tables."""
    problems = []
    for name, table in agents.items():
        where = f"$.agents[{name!r}]"
        if not _AGENT_NAME.match(name):
            problems.append(f"invalid agent name {name!r}: letters, digits, '_.-' @ {where}")
        if not isinstance(table, Mapping):
            continue
        if "name" in table:
            problems.append(f"unknown key 'name' (the table's key is the name) @ {where}")
        programs = table.get("programs")
        if isinstance(programs, list):
            for program in programs:
                if isinstance(program, str) and ("/" in program or not program):
                    problems.append(
                        f"invalid value {program!r}: programs are named bare, without a "
                        f"path @ {where}.programs"
                    )
        hosts = table.get("hosts")
        if isinstance(hosts, list) and hosts and all(isinstance(h, str) for h in hosts):
            from ..egress.rules import parse_hosts

            try:
                parse_hosts(hosts)
            except ConfigError as error:
                problems.append(f"invalid value: {error.message} @ {where}.hosts")
        problems += _binding_problems(table, where)
        workspace = table.get("workspace")
        if isinstance(workspace, str) and not os.path.isabs(os.path.expanduser(workspace)):
            problems.append(
                f"invalid value {workspace!r}: workspace must be an absolute path @ "
                f"{where}.workspace"
            )
    return problems


def _binding_problems(table: Mapping[str, Any], where: str) -> list[str]:
    """A credential binding's host must be one the profile's ``hosts`` let through, by name."""
    bindings, hosts = table.get("credentials"), table.get("hosts", [])
    if not isinstance(bindings, Mapping) or not isinstance(hosts, list):
        return []
    from ..egress.rules import match, parse_hosts

    problems = []
    for handle, binding in bindings.items():
        if not isinstance(binding, Mapping):
            problems.append(
                f"invalid value {binding!r}: a binding is a table, {handle} = {{host = "
                f'"api.example.com"}} @ {where}.credentials[{handle!r}]'
            )
            continue
        host = binding.get("host")
        if not isinstance(host, str):
            continue
        at = f"{where}.credentials[{handle!r}].host"
        try:
            [rule] = parse_hosts([host])
            rules = parse_hosts([h for h in hosts if isinstance(h, str)])
        except ConfigError as error:
            problems.append(f"invalid value: {error.message} @ {at}")
            continue
        if rule.wildcard:
            problems.append(f"invalid value {host!r}: a binding names one host, no wildcard @ {at}")
        elif match(rules, rule.host, rule.port) is None:
            problems.append(
                f"invalid value {host!r}: the profile's hosts do not let it through, so the "
                f"credential could never be used; add it to hosts @ {at}"
            )
    return problems
