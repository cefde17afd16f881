"""The mount layout of one sandbox: what is read-only, writable, masked or private.

Order matters to bubblewrap (a later mount covers an earlier one), so the layout is built
in layers: the read-only root, fresh ``/dev`` and ``/proc``, private scratch over every
directory where host sockets live, the writable roots, the protected paths inside them,
and last the masks over credential stores, which therefore win even inside a workspace.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from attrs import frozen

from stockade import protected as paths

# Where host sockets and shared scratch live: replaced by private, empty tmpfs.
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/run", "/var/run", "/dev/shm")  # noqa: S108 - masked


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


def build(
    *,
    mode: str,
    cwd: str,
    workspace: str | None = None,
    env: Mapping[str, str],
    host_env: Mapping[str, str],
    extra_writable: Iterable[str] = (),
    deny_read: Iterable[str] = (),
    keep_read_only: Iterable[str] = (),
    scan_limit: int = paths.DEFAULT_SCAN_LIMIT,
) -> Layout:
    """The layout for one run.

    Args:
        mode: ``read-only`` or ``workspace-write``.
        cwd: the command's working directory.
        workspace: the writable root of ``workspace-write`` (``cwd`` when omitted).
        env: the command's environment (its ``HOME`` is masked too).
        host_env: the host's environment (to find its home and sockets).
        extra_writable: more writable roots from configuration.
        deny_read: more paths to mask.
        keep_read_only: resolved paths to keep read-only if they lie in a writable root
            (the host's own installation, the bwrap binary, the seccomp cache).
        scan_limit: directories to visit at most looking for protected paths.

    Raises:
        SandboxUnavailable: a writable root is ``/``, or a protected path is a symlink or
            reached through one, or the scan limit was hit.
    """
    workspace = os.path.realpath(workspace or cwd)
    args: list[str] = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for private in PRIVATE_DIRS:
        if os.path.isdir(private) and not os.path.islink(private):
            args += ["--tmpfs", private]
    writable = (
        paths.writable_roots((workspace, *extra_writable)) if mode == "workspace-write" else []
    )
    if workspace not in writable:
        args += ["--ro-bind", workspace, workspace]  # visible even under a private /tmp
    for root in writable:
        args += ["--bind", root, root]
    protected, scanned = (
        paths.scan(writable, scan_limit, setting="plugins.settings.bubblewrap.scan_limit")
        if writable
        else ([], 0)
    )
    for real in keep_read_only:  # resolved by the caller
        if paths.inside(real, writable) and os.path.exists(real):
            protected.append(real)
    for path in protected:
        args += ["--ro-bind", path, path]
    masked: list[str] = []
    for home in paths.homes(env, host_env):
        cache = os.path.join(home, ".cache")
        if os.path.isdir(cache) and not os.path.islink(cache) and not paths.inside(cache, writable):
            args += ["--tmpfs", cache]  # scratch for tools' caches; the host's stay unseen
        for name in paths.CREDENTIAL_STORES:
            _mask(os.path.join(home, name), args, masked)
    for path in (*deny_read, *paths.socket_paths(host_env)):
        _mask(path, args, masked)
    args += ["--chdir", os.path.realpath(cwd)]
    return Layout(tuple(args), tuple(writable), tuple(protected), tuple(masked), scanned)


def _mask(path: str, args: list[str], masked: list[str]) -> None:
    if not os.path.lexists(path):
        return
    real = os.path.realpath(path)  # a symlinked store is masked where it really is
    if real in masked or not os.path.exists(real) or paths.inside(real, PRIVATE_DIRS):
        return  # (the host's /tmp is not there at all: the sandbox's is a fresh tmpfs)
    if os.path.isdir(real):
        args += ["--tmpfs", real, "--remount-ro", real]
    else:
        args += ["--ro-bind", "/dev/null", real]
    masked.append(real)
