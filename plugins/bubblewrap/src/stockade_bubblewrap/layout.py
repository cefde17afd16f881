"""The mount layout of one sandbox: what is read-only, writable, masked or private.

Order matters to bubblewrap (a later mount covers an earlier one), so the layout is built
in layers: the read-only root, fresh ``/dev`` and ``/proc``, private scratch over every
directory where host sockets live, the writable roots, the protected paths inside them,
and last the masks over credential stores, which therefore win even inside a workspace.
"""

from __future__ import annotations

import contextlib
import os
import pwd
from collections.abc import Iterable, Mapping

from attrs import frozen

from stockade.errors import SandboxUnavailable

# Credential stores under a home directory: masked (unreadable) in every mode.
CREDENTIAL_STORES = (
    ".ssh",
    ".aws",
    ".gnupg",
    ".kube",
    ".docker",
    ".netrc",
    ".config/gh",
    ".config/gcloud",
    ".azure",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
)
# Agent and editor configuration: read-only wherever it sits inside a writable root.
AGENT_CONFIG = frozenset(
    {".vscode", ".idea", ".mcp.json", ".claude", ".codex", ".agents", ".envrc"}
)
# Where host sockets and shared scratch live: replaced by private, empty tmpfs.
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/run", "/var/run", "/dev/shm")  # noqa: S108 - masked
DEFAULT_SCAN_LIMIT = 20_000


@frozen
class Layout:
    """The mount arguments for bwrap and what they protect.

    Attributes:
        args: bwrap options, in order.
        writable: the writable roots (empty in read-only mode).
        protected: paths inside writable roots kept read-only.
        masked: paths made unreadable.
        scanned: directories visited looking for protected paths.
    """

    args: tuple[str, ...]
    writable: tuple[str, ...]
    protected: tuple[str, ...]
    masked: tuple[str, ...]
    scanned: int


def homes(env: Mapping[str, str], host_env: Mapping[str, str]) -> list[str]:
    """Every home directory whose credential stores must be masked."""
    found = [env.get("HOME", ""), host_env.get("HOME", "")]
    with contextlib.suppress(KeyError):
        found.append(pwd.getpwuid(os.getuid()).pw_dir)
    out: list[str] = []
    for home in found:
        if home and os.path.isabs(home):
            real = os.path.realpath(home)
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


def build(
    *,
    mode: str,
    cwd: str,
    env: Mapping[str, str],
    host_env: Mapping[str, str],
    extra_writable: Iterable[str] = (),
    deny_read: Iterable[str] = (),
    keep_read_only: Iterable[str] = (),
    scan_limit: int = DEFAULT_SCAN_LIMIT,
) -> Layout:
    """The layout for one run.

    Args:
        mode: ``read-only`` or ``workspace-write``.
        cwd: the workspace (the command's working directory).
        env: the command's environment (its ``HOME`` is masked too).
        host_env: the host's environment (to find its home and sockets).
        extra_writable: more writable roots from configuration.
        deny_read: more paths to mask.
        keep_read_only: paths to keep read-only if they lie in a writable root (the host's
            own installation, the bwrap binary).
        scan_limit: directories to visit at most looking for protected paths.

    Raises:
        SandboxUnavailable: a writable root is ``/``, or a protected path is a symlink or
            reached through one, or the scan limit was hit.
    """
    workspace = os.path.realpath(cwd)
    args: list[str] = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for private in PRIVATE_DIRS:
        if os.path.isdir(private) and not os.path.islink(private):
            args += ["--tmpfs", private]
    writable = _writable_roots(workspace, extra_writable) if mode == "workspace-write" else []
    if workspace not in writable:
        args += ["--ro-bind", workspace, workspace]  # visible even under a private /tmp
    for root in writable:
        args += ["--bind", root, root]
    protected, scanned = _scan(writable, scan_limit) if writable else ([], 0)
    for path in keep_read_only:
        real = os.path.realpath(path)
        if os.path.exists(real) and _inside(real, writable):
            protected.append(real)
    for path in protected:
        args += ["--ro-bind", path, path]
    masked: list[str] = []
    for home in homes(env, host_env):
        cache = os.path.join(home, ".cache")
        if os.path.isdir(cache) and not os.path.islink(cache) and not _inside(cache, writable):
            args += ["--tmpfs", cache]  # scratch for tools' caches; the host's stay unseen
        for name in CREDENTIAL_STORES:
            _mask(os.path.join(home, name), args, masked)
    for path in (*deny_read, *socket_paths(host_env)):
        _mask(path, args, masked)
    args += ["--chdir", os.path.realpath(cwd)]
    return Layout(tuple(args), tuple(writable), tuple(protected), tuple(masked), scanned)


def _writable_roots(workspace: str, extra: Iterable[str]) -> list[str]:
    writable: list[str] = []
    for root in (workspace, *extra):
        real = os.path.realpath(root)
        if real == "/":
            raise SandboxUnavailable(
                "refusing / as a writable root: it would make every file writable",
                hint="name a project directory as the workspace",
            )
        if os.path.isdir(real) and real not in writable:
            writable.append(real)
    return writable


def _inside(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _mask(path: str, args: list[str], masked: list[str]) -> None:
    if not os.path.lexists(path):
        return
    real = os.path.realpath(path)  # a symlinked store is masked where it really is
    if real in masked or not os.path.exists(real):
        return
    if os.path.isdir(real):
        args += ["--tmpfs", real, "--remount-ro", real]
    else:
        args += ["--ro-bind", "/dev/null", real]
    masked.append(real)


def _scan(roots: list[str], limit: int) -> tuple[list[str], int]:
    """Protected paths under ``roots``: every ``.git``, ``gitdir:`` targets, agent config.

    Symlinked directories are not followed; a protected name that is itself a symlink is
    refused, since what it points at cannot be told apart from a planted redirection.
    """
    protected: list[str] = []
    stack = list(roots)
    scanned = 0
    while stack:
        directory = stack.pop()
        scanned += 1
        if scanned > limit:
            raise SandboxUnavailable(
                f"more than {limit} directories under {', '.join(roots)} to scan for "
                "protected paths (.git, agent config)",
                hint="raise plugins.settings.bubblewrap.scan_limit, or use a smaller workspace",
                details={"scan_limit": limit},
            )
        try:
            entries = list(os.scandir(directory))
        except OSError as error:
            _unlisted(directory, error)
            continue
        for entry in entries:
            name = entry.name
            if name == ".git" or name in AGENT_CONFIG:
                if entry.is_symlink():
                    raise SandboxUnavailable(
                        f"protected path {entry.path} is a symlink; refusing to guess what "
                        "it protects",
                        hint="replace the symlink with the directory or file itself",
                        details={"path": entry.path},
                    )
                protected.append(entry.path)
                if name == ".git" and entry.is_file(follow_symlinks=False):
                    target = _gitdir(entry.path)
                    if target is not None and _inside(target, roots):
                        protected.append(target)
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return protected, scanned


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


def _gitdir(path: str) -> str | None:
    """The directory a ``.git`` file points at; refused when the way there has a symlink."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline().strip()
    except OSError as error:
        raise SandboxUnavailable(
            f"cannot read {path} to protect the repository it names: {error.strerror}",
            hint=f"give it back its read permission (chmod u+r {path})",
            details={"path": path},
        ) from None
    if not first.startswith("gitdir:"):
        return None
    target = os.path.normpath(os.path.join(os.path.dirname(path), first[7:].strip()))
    if os.path.realpath(target) != target:
        raise SandboxUnavailable(
            f"the gitdir of {path} ({target}) is reached through a symlink; refusing to "
            "guess which repository to protect",
            hint="point the gitdir: line at the real directory",
            details={"path": path, "gitdir": target},
        )
    return target if os.path.isdir(target) else None
