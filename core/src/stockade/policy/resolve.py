"""The resolve stage: a request plus config becomes a spec with every field explicit.

The child's environment is decided here, once, for every executor: an allowlist of ambient
names (PATH, HOME, LANG, LC_*, TZ and the config's extras), never a name that looks like a
secret, then fixed non-interactive settings, then the caller's explicit entries, which win.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping

import attrs

from .. import resolved
from ..config.dirs import state_dir
from ..config.schema import Config, store_folder
from ..confine.protected import inside
from ..errors import BadCwd, ProgramNotFound, UsageError
from ..request.spec import ExecRequest, ExecSpec, Profile, new_action_id
from ..request.step import Agent
from ..workspace.folders import has_own, workspace_of

AMBIENT_ALLOW = ("PATH", "HOME", "LANG", "TZ")
SECRET_PATTERN = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
FIXED_ENV = {"CI": "1", "PAGER": "cat", "GIT_PAGER": "cat", "NO_COLOR": "1", "TERM": "dumb"}
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_secret_name(name: str) -> bool:
    """Whether an ambient variable's name looks like it holds a secret."""
    return SECRET_PATTERN.search(name) is not None


def child_env(
    ambient: Mapping[str, str], explicit: Mapping[str, str], extra_allow: Iterable[str] = ()
) -> dict[str, str]:
    """The environment a child gets: allowlisted ambient names, fixed settings, explicit entries."""
    allow = set(AMBIENT_ALLOW).union(extra_allow)
    env = {
        name: value
        for name, value in ambient.items()
        if (name in allow or name.startswith("LC_")) and not is_secret_name(name)
    }
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(FIXED_ENV)
    for name, value in explicit.items():
        if not _ENV_NAME.match(name):
            raise UsageError(f"invalid environment variable name {name!r}")
        if "\0" in value:
            raise UsageError(f"environment variable {name} contains a NUL byte")
        env[name] = value
    return env


def find_program(name: str, search_path: str, cwd: str) -> str:
    """The absolute path of the executable ``name`` names, searched like ``execvp`` would.

    Raises:
        ProgramNotFound: naming the program and the PATH searched.
    """
    if "/" in name:
        candidate = os.path.normpath(os.path.join(cwd, name))
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
        raise ProgramNotFound(
            f"program not found: {name} (no executable file at {candidate})",
            hint="check the path, or name a program on PATH",
            details={"program": name, "path": candidate},
        )
    for directory in search_path.split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate if os.path.isabs(candidate) else os.path.join(cwd, candidate)
    raise ProgramNotFound(
        f"program not found: {name} (searched PATH={search_path})",
        hint="install it, name it by path, or pass a PATH that contains it with --env PATH=...",
        details={"program": name, "searched": search_path},
    )


def resolve(
    request: ExecRequest,
    config: Config,
    ambient: Mapping[str, str],
    *,
    run_id: str = "",
    step: int = 0,
    run_elapsed: float = 0.0,
    home: str | None = None,
    agent: Agent | None = None,
    here: str | None = None,
) -> ExecSpec:
    """The spec for ``request``: defaults filled from its agent profile and the config,
    caps applied, cwd and program checked.

    Raises:
        ConfigError: the request names an agent profile that is not configured.
        UsageError: a timeout or limit is out of range, or an env entry is invalid.
        BadCwd: the working directory does not exist, or lies outside the workspace.
        UnsafeRoot: the agent's configured workspace can never be a writable root.

    ``home`` is the run's home for an agent's profile: ``HOME`` points there, and the
    package caches' variables (``PIP_CACHE_DIR``, ...) at the agent's kept caches, unless
    the request names them itself. ``agent`` is the request's profile, resolved once by the
    host (looked up here when omitted). A request that names no folder
    runs ``here`` (this process's own when omitted): a server's caller's folder.
        ProgramNotFound: ``argv[0]`` names no executable.
    """
    if agent is None:  # a caller outside the pipeline (``stockade classify``, tests)
        agent = Agent(config.profile(request.profile), has_own(config, request.profile))
    profile = agent.profile
    workspace, cwd = _workspace(
        request, profile, workspace_of(config, profile, own=agent.own_workspace), here
    )
    timeout = request.timeout if request.timeout is not None else profile.timeout
    timeout = config.timeout.default if timeout is None else float(timeout)
    if not timeout > 0 or math.isinf(timeout):
        raise UsageError(f"timeout must be a positive number of seconds, got {request.timeout!r}")
    if request.memory_mb is not None and request.memory_mb <= 0:
        raise UsageError(f"memory_mb must be a positive number, got {request.memory_mb!r}")
    limits = config.limits
    # ``[limits]`` is a default a request may change; the profile's limit is a cap.
    caps = [profile.memory_mb] if profile.memory_mb is not None else []
    memory = request.memory_mb if request.memory_mb is not None else profile.memory_mb
    if memory is not None:
        limits = attrs.evolve(limits, memory_mb=min([memory, *caps]))
    mode = request.mode or config.mode
    if profile.autonomy == "read-only":
        mode = "read-only"
    for name in request.credentials:
        if not _ENV_NAME.match(name):
            raise UsageError(f"invalid environment variable name for a credential: {name!r}")
    caches: tuple[str, ...] = ()
    explicit: Mapping[str, str] = request.env
    if home is not None:
        from ..workspace.folders import CACHE_ENV, cache_of

        cache = cache_of(config, profile.name)
        caches = (cache,)
        given = {name: os.path.join(cache, sub) for name, sub in CACHE_ENV.items()}
        explicit = {"HOME": home, **given, **request.env}
    env = child_env(ambient, explicit, config.env.allow)
    check_exec_size(request.argv, env)
    grants = tuple(_granted(path, cwd) for path in request.grant_writable)
    return ExecSpec(
        new_action_id(),
        request.argv,
        program=find_program(request.argv[0], env["PATH"], cwd),
        cwd=cwd,
        workspace=workspace,
        env=env,
        stdin=request.stdin or b"",
        timeout=min(timeout, config.timeout.max),
        kill_grace=config.timeout.kill_grace,
        mode=mode,
        sandbox=request.sandbox or config.sandbox,
        output_limit=config.output.limit,
        limits=limits,
        credentials=handed(profile, request.credentials),
        origin=request.origin,
        profile=request.profile,
        preapproved=request.preapproved,
        run_id=run_id,
        step=step,
        run_elapsed=run_elapsed,
        grant_writable=grants,
        hidden=_hidden(config),
        read_private=request.read_private,
        system_secrets=config.system_secrets,
        home=home,
        caches=caches,
        writable_dotfiles=profile.writable_dotfiles,
        layer_store=store_folder(config),
        commit="never" if request.dry_run else profile.commit,
    )


MAX_ARG_BYTES = 131072
"""The kernel's limit on one argument or environment entry (``MAX_ARG_STRLEN``), with its NUL."""


def check_exec_size(argv: Iterable[str], env: Mapping[str, str]) -> None:
    """Refuse, as a usage error, an argv the kernel would not start (``E2BIG``).

    Raises:
        UsageError: an argument is longer than :data:`MAX_ARG_BYTES`, or the argv and the
            environment together pass half of ``ARG_MAX`` (the rest is the sandbox's own).
    """
    total = 0
    for index, arg in enumerate(argv):
        size = len(arg.encode("utf-8", "surrogateescape")) + 1
        if size > MAX_ARG_BYTES:
            raise UsageError(
                f"argument {index} is {size - 1} bytes long; the kernel starts no program "
                f"with an argument longer than {MAX_ARG_BYTES - 1} bytes",
                hint="write it to a file in the workspace and pass the file's name",
            )
        total += size + 8
    total += sum(
        len(k.encode()) + len(v.encode("utf-8", "surrogateescape")) + 10 for k, v in env.items()
    )
    budget = os.sysconf("SC_ARG_MAX") // 2
    if total > budget:
        raise UsageError(
            f"the arguments and environment take {total} bytes; the kernel starts programs "
            f"with at most {budget * 2}, and the sandbox needs room of its own",
            hint="pass a long list in a file (xargs -a FILE, or a tool's @FILE), or split "
            "the command into several",
        )


def handed(profile: Profile, asked: Mapping[str, str]) -> dict[str, str]:
    """The credentials a command gets: those it asked for, and each binding of its profile
    that names an ``env`` (the command holds that credential's placeholder there, unasked).
    A request's own entry for a variable wins."""
    given = {b.env: handle for handle, b in sorted(profile.credentials.items()) if b.env}
    return {**given, **asked}


def _hidden(config: Config) -> tuple[str, ...]:
    """Stockade's own state: the store's folder (and the default one)."""
    return tuple(dict.fromkeys((state_dir(os.environ), store_folder(config))))


def _granted(path: str, cwd: str) -> str:
    """A folder named in a writable grant, resolved; it must exist."""
    from ..confine.roots import resolve_path

    real = resolve_path(path, cwd, role="grant")
    if not os.path.isdir(real):
        raise UsageError(
            f"a writable grant names {path}, which is not a folder",
            hint="grant an existing folder",
            details={"grant_writable": path},
        )
    return real


def _workspace(
    request: ExecRequest, profile: Profile, workspace: str | None, here: str | None = None
) -> tuple[str, str]:
    """The workspace (resolved) and the working directory; the second lies inside the first.

    Whether the workspace may be written is decided later, by
    :func:`stockade.confine.roots.check_spec`,
    once the mode the command runs in is known.
    """
    base = here or os.getcwd()  # relative paths are the caller's, not this process's
    if request.workspace is not None:
        named = resolved.realpath(os.path.join(base, request.workspace))
        if workspace is not None and named != resolved.realpath(workspace):
            raise UsageError(
                f"agent {profile.name!r} works in {workspace}; a request cannot name {named}",
                hint="leave the workspace out: the profile's own is used",
                details={"workspace": workspace, "requested": named},
            )
        workspace = named
    default = workspace if workspace is not None else base
    cwd = os.path.abspath(os.path.join(base, request.cwd) if request.cwd is not None else default)
    if not os.path.isdir(cwd):
        what = "is not a directory" if os.path.exists(cwd) else "does not exist"
        raise BadCwd(
            f"working directory {cwd} {what}",
            hint="pass an existing directory with --cwd",
            details={"cwd": cwd},
        )
    if workspace is None:
        # Resolved once, here: the root the rule checks is the root the sandbox binds.
        return resolved.realpath(cwd), cwd
    if not os.path.isdir(workspace):
        raise BadCwd(
            f"the workspace of agent {profile.name!r}, {workspace}, is not a directory",
            hint=f"create it, or fix agents.{profile.name}.workspace",
            details={"workspace": workspace},
        )
    real, real_cwd = resolved.realpath(workspace), resolved.realpath(cwd)
    if not inside(real_cwd, (real,)):
        raise BadCwd(
            f"working directory {cwd} is outside the workspace of agent {profile.name!r} "
            f"({workspace})",
            hint="run inside the workspace, or name a profile whose workspace holds it",
            details={"cwd": cwd, "workspace": workspace},
        )
    return real, cwd
