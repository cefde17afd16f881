"""What every confining backend protects, found the same way: the shared protected paths.

Inside a writable root, at any depth, some paths must not keep what a command writes:
every ``.git`` (so a command cannot plant a hook that runs later, outside any sandbox),
the directory a ``.git`` file's ``gitdir:`` names, a ``core.hooksPath`` folder, a bare
repository's hooks and config, agent or editor configuration that a person's tools run
or trust (:data:`AGENT_CONFIG`), dotfiles that shells and tools run (:data:`DOTFILES`)
and folders whose entries run later (:data:`RUN_LATER`). Credential stores
(:data:`CREDENTIAL_STORES`) must be unreadable, under every home and inside every
writable root. Host sockets the environment names must be unreachable. System secrets
(:mod:`stockade.confine.system_secrets`) must be unreadable in every confined mode, as root too.

This module finds them (:func:`survey`); each sandbox provider enforces the existing ones
its own way (bubblewrap with read-only binds and masks; Landlock masks the credential
stores, and the host puts the rest back after the run), and the host quarantines the
ones that appear during a run (:mod:`stockade.run.guard`). It is in the core so that all read
one list and one walk, and a fix reaches all.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
import time
from collections.abc import Iterable, Mapping
from typing import Literal

from attrs import field, frozen

from .. import resolved
from ..errors import SandboxUnavailable, UsageError
from ..request.literals import DOTFILES
from ..resolved import inside
from . import gitconfig
from . import roots as rules
from .stores import CREDENTIAL_STORES

__all__ = [
    "AGENT_CONFIG",
    "BARE_KEPT",
    "COMMON_DIR_MARKS",
    "DEFAULT_SCAN_LIMIT",
    "DEFAULT_SNAPSHOT_LIMIT_MB",
    "GIT",
    "GIT_DIR_MARKS",
    "RUN_LATER",
    "Folder",
    "Kind",
    "Survey",
    "enclosing",
    "git_dir",
    "homes",
    "inside",
    "kind_of",
    "opened",
    "scan",
    "socket_paths",
    "stamp",
    "survey",
    "writable_roots",
]

# Agent, editor and git-hook-manager configuration: read-only wherever it sits inside a
# writable root (each of these names a command that some tool runs, or an MCP server).
AGENT_CONFIG = frozenset(
    {
        ".vscode",
        ".idea",
        ".mcp.json",
        ".claude",
        ".codex",
        ".agents",
        ".envrc",
        ".cursor",
        ".continue",
        ".gemini",
        ".windsurf",
        ".zed",
        ".amazonq",
        ".roo",
        ".kiro",
        ".devcontainer",
        ".aider.conf.yml",
        ".husky",
        ".pre-commit-config.yaml",
    }
)
"""Agent, editor and git-hook-manager configuration names: read-only at any depth of a
writable root."""
# Files that shells, git and other tools read and run from a home, protected at any depth
# of a writable root (a workspace is often a home's subfolder or a dotfiles checkout). A
# profile may open some of them with ``writable_dotfiles``.
# Folders under a home whose entries run later (at login, on a schedule, first on PATH):
# read-only wherever a writable root holds them (a root at ``~/.config``, a dotfiles tree).
RUN_LATER = (
    ".config/autostart",
    ".config/autostart-scripts",
    ".config/systemd/user",
    ".config/environment.d",
    ".config/plasma-workspace/env",
    ".config/git",
    ".config/fish",
    ".local/share/systemd/user",
    ".local/share/applications",
    ".local/bin",
    ".cargo/config.toml",
    ".cargo/config",
    ".ipython/profile_default/startup",
    ".ssh/authorized_keys",
)
"""Folders (relative to a home) whose entries run later: read-only wherever a writable root
holds them."""
GIT = ".git"
# A bare repository's own files that run later: kept like a .git (its objects and refs
# stay writable, so a push to it works); one that appears during a run goes whole.
GIT_DIR_MARKS = frozenset({"HEAD", "objects", "refs"})
COMMON_DIR_MARKS = frozenset({"HEAD", "commondir"})  # a repository whose common part is elsewhere
# What git reads a repository's hooks, config or common folder from: commondir (its hooks
# and config are then the named folder's), config.worktree, worktrees/ and modules/ (each a
# repository's own files again).
BARE_KEPT = ("hooks", "config", "info", "commondir", "config.worktree", "worktrees", "modules")
DEFAULT_SNAPSHOT_LIMIT_MB = 64
Kind = Literal["read-only", "masked"]
# Per last component: (the whole relative path, its kind); single names need no slash.
_SUFFIXES: dict[str, list[tuple[str, Kind]]] = {}
for _path, _kind in (
    *((p, "masked") for p in CREDENTIAL_STORES),
    *((p, "read-only") for p in RUN_LATER),
):
    _SUFFIXES.setdefault(_path.rsplit("/", 1)[-1], []).append((_path, _kind))  # type: ignore[arg-type]
DEFAULT_SCAN_LIMIT = 20_000
"""Directories :func:`survey` visits at most, unless a provider's ``scan_limit`` says more."""


def homes(env: Mapping[str, str], host_env: Mapping[str, str]) -> list[str]:
    """Every home directory whose credential stores must be masked."""
    found = [env.get("HOME", ""), host_env.get("HOME", "")]
    with contextlib.suppress(KeyError):
        found.append(pwd.getpwuid(os.getuid()).pw_dir)
    out: list[str] = []
    for home in found:
        if home and os.path.isabs(home):
            real = resolved.realpath(home)
            if real != "/" and real not in out:
                out.append(real)
    return out


def socket_paths(host_env: Mapping[str, str]) -> list[str]:
    """Host sockets the environment names (agent, session bus, docker), to mask by path."""
    paths = [host_env.get("SSH_AUTH_SOCK", "")]
    for part in host_env.get("DBUS_SESSION_BUS_ADDRESS", "").split(";"):
        for item in part.partition(":")[2].split(","):
            key, _, value = item.partition("=")
            if key == "path":
                paths.append(value)
    docker = host_env.get("DOCKER_HOST", "")
    if docker.startswith("unix://"):
        paths.append(docker[len("unix://") :])
    return [p for p in paths if p and os.path.isabs(p)]


def writable_roots(roots: Iterable[str], system: rules.RootRules | None = None) -> list[str]:
    """``roots`` resolved, existing directories only, each once; unsafe ones refused.
    ``system``: ``RootRules.of(None, os.environ)`` read once by a caller that checks
    several sets of roots for one command (read here when omitted).

    Raises:
        UnsafeRoot: a root is ``/``, a system folder, a home, ... (:func:`roots.check_system`).
    """
    writable: list[str] = []
    for root in roots:
        real = resolved.realpath(root)
        system = system or rules.RootRules.of(None, os.environ)  # the homes read once
        rules.check_system(real, system)
        if os.path.isdir(real) and real not in writable:
            writable.append(real)
    return writable


def opened(names: Iterable[str]) -> frozenset[str]:
    """The dotfiles a profile's ``writable_dotfiles`` opens (``*``: all of them).

    Raises:
        UsageError: a name is not one of :data:`DOTFILES`.
    """
    names = tuple(names)
    if "*" in names:
        return DOTFILES
    unknown = sorted(set(names) - DOTFILES)
    if unknown:
        raise UsageError(
            f"writable_dotfiles names {', '.join(unknown)}, which are not protected dotfiles",
            hint=f"name some of {', '.join(sorted(DOTFILES))}, or '*' for all",
            details={"unknown": unknown},
        )
    return frozenset(names)


def kind_of(path: str, writable_dotfiles: frozenset[str] = frozenset()) -> Kind | None:
    """Whether ``path`` (absolute, normalised) is protected, and how.

    ``read-only``: ``.git``, agent config, dotfiles (less ``writable_dotfiles``) and the
    folders of :data:`RUN_LATER`; ``masked``: the credential stores.
    """
    name = path.rsplit("/", 1)[-1].lower()  # a case-folding filesystem reads .VSCode too
    if name == GIT or name in AGENT_CONFIG:
        return "read-only"
    if name in DOTFILES and name not in writable_dotfiles:
        return "read-only"
    for suffix, kind in _SUFFIXES.get(name, ()):
        if "/" not in suffix or path.lower().endswith("/" + suffix):
            return kind
    return None


def git_dir(names: Iterable[str]) -> bool:
    """Whether a folder with these entries is a git directory by git's own test (``HEAD``,
    ``objects``, ``refs``; or ``HEAD`` and ``commondir``, whose objects, refs, hooks and
    config are the named folder's): a bare repository, which git finds from inside it."""
    have = set(names)
    return have >= GIT_DIR_MARKS or have >= COMMON_DIR_MARKS


def enclosing(path: str, writable_dotfiles: frozenset[str] = frozenset()) -> Kind | None:
    """How ``path`` is protected when it, or a folder holding it, is a protected path."""
    kinds = set()
    while path not in ("/", ""):
        kind = kind_of(path, writable_dotfiles)
        if kind is not None:
            kinds.add(kind)
        path = os.path.dirname(path)
    return "masked" if "masked" in kinds else ("read-only" if kinds else None)


@frozen
class Folder:
    """A folder the survey listed, as it was: enough to tell later that it did not change.

    Attributes:
        path: the folder.
        stamp: its inode, modification and change times (a change time cannot be set back).
        children: the names of the folders beneath it that were listed in turn.
    """

    path: str
    stamp: tuple[int, int, int]
    children: tuple[str, ...]


@frozen
class Survey:
    """The protected paths under some writable roots, found before a command runs.

    Attributes:
        roots: the writable roots, resolved.
        read_only: paths kept read-only (bubblewrap) or put back after the run (Landlock).
        masked: credential stores inside the roots: unreadable and unwritable.
        folders: every folder listed, with its stamp (the check after the run relists only
            the folders whose stamp changed).
        bare: bare repositories (folders git takes for a git directory, not named ``.git``):
            their ``hooks``, ``config`` and ``info`` are among ``read_only``.
        hooks: every folder a git config names as ``core.hooksPath`` inside the roots,
            there or not yet: nothing lands at or beneath one.
        started: ``time.time_ns()`` when the survey began.
        writable_dotfiles: the dotfiles the profile opened.
        held: the provider keeps ``read_only`` read-only while the command runs; when
            false, the host snapshots them and puts them back after it.
        snapshot_limit: bytes a snapshot of ``read_only`` may take, when not ``held``.
        snapshot_setting: the setting that raises ``snapshot_limit``, named in a refusal.
    """

    roots: tuple[str, ...]
    read_only: tuple[str, ...] = field(kw_only=True, default=())
    masked: tuple[str, ...] = field(kw_only=True, default=())
    folders: tuple[Folder, ...] = field(kw_only=True, default=())
    bare: tuple[str, ...] = field(kw_only=True, default=())
    hooks: tuple[str, ...] = field(kw_only=True, default=())
    started: int = field(kw_only=True, default=0)
    writable_dotfiles: frozenset[str] = field(kw_only=True, default=frozenset())
    held: bool = field(kw_only=True, default=False)
    snapshot_limit: int = field(kw_only=True, default=DEFAULT_SNAPSHOT_LIMIT_MB << 20)
    snapshot_setting: str = field(kw_only=True, default="")

    @property
    def scanned(self) -> int:
        """How many folders were listed."""
        return len(self.folders)


def stamp(info: os.stat_result) -> tuple[int, int, int]:
    """What tells a folder's listing apart from a later one: inode, mtime, ctime."""
    return (info.st_ino, info.st_mtime_ns, info.st_ctime_ns)


def survey(
    roots: list[str],
    limit: int,
    *,
    setting: str,
    writable_dotfiles: frozenset[str] = frozenset(),
) -> Survey:
    """The protected paths under ``roots``: every ``.git``, ``gitdir:`` targets, a bare
    repository's hooks and config, agent config, dotfiles, run-later folders and
    credential stores, at any depth.

    Symlinked directories are not followed; a protected name that is itself a symlink is
    refused, since what it points at cannot be told apart from a planted redirection. A
    root that lies inside a protected path is protected whole.

    Args:
        roots: the writable roots, resolved.
        limit: the most directories to visit.
        setting: the configuration key that sets ``limit``, named in the refusal.
        writable_dotfiles: dotfiles left writable (a profile's opt-out).

    Raises:
        SandboxUnavailable: a protected path is a symlink or reached through one, the
            limit was hit, or a directory that a command could have hidden is unlisted.
    """
    started = time.time_ns()
    found: dict[str, Kind] = {}
    folders: list[Folder] = []
    bare: list[str] = []
    hooks: list[str] = []
    stack = []
    for root in roots:
        gitconfig.keep_around(root, roots, found, hooks)  # a repository around, or to come
        kind = enclosing(root, writable_dotfiles)
        if kind is not None:
            found[root] = kind
        else:
            stack.append(root)
    while stack:
        directory = stack.pop()
        if len(folders) >= limit:
            raise SandboxUnavailable(
                f"more than {limit} directories under {', '.join(roots)} to scan for "
                "protected paths (.git, agent config, dotfiles, credential stores)",
                hint=f"raise {setting}, or use a smaller workspace",
                details={"scan_limit": limit},
            )
        try:
            info = os.stat(directory, follow_symlinks=False)
            entries = list(os.scandir(directory))
        except OSError as error:
            _unlisted(directory, error)
            continue
        if git_dir(e.name for e in entries):
            bare.append(directory)
            for entry in entries:
                if entry.name in BARE_KEPT:
                    _check(entry, "read-only", roots, found, hooks)
            gitconfig.keep_named(directory, directory, roots, found, hooks)
            folders.append(Folder(directory, stamp(info), ()))
            continue
        children = []
        for entry in entries:
            kind = kind_of(entry.path, writable_dotfiles)
            if kind is not None:
                _check(entry, kind, roots, found, hooks)
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
                children.append(entry.name)
        folders.append(Folder(directory, stamp(info), tuple(children)))
    return Survey(
        tuple(roots),
        read_only=tuple(p for p, k in found.items() if k == "read-only"),
        masked=tuple(p for p, k in found.items() if k == "masked"),
        folders=tuple(folders),
        bare=tuple(bare),
        hooks=tuple(dict.fromkeys(hooks)),
        started=started,
        writable_dotfiles=writable_dotfiles,
    )


def _check(
    entry: os.DirEntry[str], kind: Kind, roots: list[str], found: dict[str, Kind], hooks: list[str]
) -> None:
    """Add a protected entry to ``found`` (with its ``gitdir:`` target); refuse a symlink."""
    if entry.is_symlink():
        raise SandboxUnavailable(
            f"protected path {entry.path} is a symlink; refusing to guess what it protects",
            hint="replace the symlink with the directory or file itself",
            details={"path": entry.path},
        )
    found[entry.path] = kind
    if entry.name != GIT:
        return
    gitdir: str | None = entry.path
    if entry.is_file(follow_symlinks=False):
        gitdir = gitconfig.gitdir_of(entry.path)
        if gitdir is not None and inside(gitdir, roots):
            found.setdefault(gitdir, "read-only")
    if gitdir is not None:
        gitconfig.keep_named(gitdir, os.path.dirname(entry.path), roots, found, hooks)


def real(path: str) -> str:
    """Where ``path`` leads, every symlink followed, as the kernel resolves it (one ``open``
    with ``O_PATH``, read back from ``/proc/self/fd``: far cheaper than
    :func:`os.path.realpath`'s ``lstat`` of every component); ``os.path.realpath`` where the
    path does not lead anywhere (or ``/proc`` is missing)."""
    found = existing(path)
    return found[0] if found is not None else resolved.realpath(path)


def existing(path: str) -> tuple[str, bool] | None:
    """Where ``path`` leads and whether that is a folder, as :func:`real` resolves it, from
    one ``O_PATH`` descriptor; ``None`` when it leads nowhere (missing, a dangling or
    looping symlink, a folder on the way that may not be searched)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        found = os.readlink(f"/proc/self/fd/{fd}")
        is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
    except OSError:
        found, is_dir = "", False
    finally:
        os.close(fd)
    if found.startswith("/") and not found.endswith(" (deleted)"):
        return found, is_dir
    found = resolved.realpath(path)  # no /proc: resolved as before
    return (found, os.path.isdir(found)) if os.path.exists(found) else None


def scan(roots: list[str], limit: int, *, setting: str) -> tuple[list[str], int]:
    """The read-only protected paths under ``roots`` and how many folders were listed
    (:func:`survey`, for callers that need only those)."""
    found = survey(roots, limit, setting=setting)
    return list(found.read_only), found.scanned


def _unlisted(directory: str, error: OSError) -> None:
    """Refuse a directory the scan cannot list, unless no command here could write in it.

    A command may take the read permission off a directory it owns; the next run would not
    see the ``.git`` inside, and the command could put the permission back and write there.
    """
    try:
        owner = os.stat(directory).st_uid
    except OSError:
        return  # gone since it was listed: nothing there to protect
    if owner == os.getuid() or os.access(directory, os.W_OK):
        raise SandboxUnavailable(
            f"cannot look for protected paths in {directory}: {error.strerror}",
            hint=f"give it back its read permission (chmod u+rx {directory})",
            details={"path": directory},
        )
