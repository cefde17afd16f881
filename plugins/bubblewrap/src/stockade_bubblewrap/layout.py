"""The mount layout of one sandbox: what is read-only, writable, masked or private.

Order matters to bubblewrap (a later mount covers an earlier one), so the layout is built
in layers: the read-only root, fresh ``/dev`` and ``/proc``, private scratch over every
directory where host sockets live, the writable roots, the protected paths inside them
(read-only; the credential stores among them masked), and last the masks over credential
stores under homes, which therefore win even inside a workspace.

Only what exists can be mounted over: a protected name that appears during the run is the
host's to quarantine afterwards (:mod:`stockade.guard`), from the survey kept here.
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
        survey: the protected paths found in the writable roots (``None`` when none is
            writable), for the host's check after the run.
    """

    args: tuple[str, ...]
    writable: tuple[str, ...]
    protected: tuple[str, ...]
    masked: tuple[str, ...]
    scanned: int
    survey: paths.Survey | None = None


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
    scratch: Iterable[str] = (),
    shared: Iterable[str] = (),
    scan_limit: int = paths.DEFAULT_SCAN_LIMIT,
    writable_dotfiles: frozenset[str] = frozenset(),
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
        scratch: folders writable in every mode (the run's home).
        shared: folders writable in ``workspace-write`` and read-only otherwise (caches).
        scan_limit: directories to visit at most looking for protected paths.
        writable_dotfiles: protected dotfiles left writable (the profile's opt-out).

    A bound folder may lie inside a masked one (an agent's workspace, home and caches
    live in Stockade's hidden store): that mask is laid first and made read-only last, so
    the binds show through it and nothing else of it does.

    Raises:
        SandboxUnavailable: a writable root is ``/``, or a protected path is a symlink or
            reached through one, or the scan limit was hit.
    """
    workspace = os.path.realpath(workspace or cwd)
    shared = [os.path.realpath(p) for p in shared if os.path.isdir(p)]
    writing = mode == "workspace-write"
    writable = paths.writable_roots(
        (*((workspace, *extra_writable, *shared) if writing else ()), *scratch)
    )
    read_only = [p for p in (workspace, *shared) if p not in writable]
    masks = _masks(env, host_env, deny_read, writable)
    bound = (*writable, *read_only)
    first = [m for m in masks if m.is_dir and any(paths.inside(b, [m.path]) for b in bound)]
    args: list[str] = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for private in PRIVATE_DIRS:
        if os.path.isdir(private) and not os.path.islink(private):
            args += ["--tmpfs", private]
    # Outer before inner: a folder is mounted before anything beneath it.
    mounts: list[tuple[str, tuple[str, ...]]] = [(m.path, ("--tmpfs", m.path)) for m in first]
    mounts += [(f, ("--ro-bind", f, f)) for f in read_only]  # seen even under a private /tmp
    mounts += [(r, ("--bind", r, r)) for r in writable]
    for _, mount in sorted(mounts, key=lambda item: item[0].rstrip("/").count("/")):
        args += mount
    # The run's home and the caches are the agent's own scratch, outside the person's reach.
    own = {os.path.realpath(p) for p in (*scratch, *shared)}
    survey = _survey([r for r in writable if r not in own], scan_limit, writable_dotfiles)
    protected = list(survey.read_only) if survey is not None else []
    for real in keep_read_only:  # resolved by the caller
        if paths.inside(real, writable) and os.path.exists(real):
            protected.append(real)
    for path in protected:
        args += ["--ro-bind", path, path]
    stores = survey.masked if survey is not None else ()
    args += _mask_stores(stores)
    for mask in masks:
        if mask in first:
            args += ["--remount-ro", mask.path]
        elif mask.scratch:
            args += ["--tmpfs", mask.path]
        elif mask.is_dir:
            args += ["--tmpfs", mask.path, "--remount-ro", mask.path]
        else:
            args += ["--ro-bind", "/dev/null", mask.path]
    args += ["--chdir", os.path.realpath(cwd)]
    masked = (*stores, *(m.path for m in masks if not m.scratch))
    scanned = survey.scanned if survey is not None else 0
    return Layout(tuple(args), tuple(writable), tuple(protected), masked, scanned, survey)


def _survey(
    roots: list[str], scan_limit: int, writable_dotfiles: frozenset[str]
) -> paths.Survey | None:
    """The protected paths in ``roots`` (none to look for when no root is writable)."""
    if not roots:
        return None
    setting = "plugins.settings.bubblewrap.scan_limit"
    return paths.survey(roots, scan_limit, setting=setting, writable_dotfiles=writable_dotfiles)


def _mask_stores(stores: Iterable[str]) -> list[str]:
    """Credential stores inside a writable root, masked as under a home: an empty
    read-only folder, or ``/dev/null`` over a file."""
    args: list[str] = []
    for path in stores:
        if os.path.isdir(path):
            args += ["--tmpfs", path, "--remount-ro", path]
        else:
            args += ["--ro-bind", "/dev/null", path]
    return args


@frozen
class _Mask:
    path: str
    is_dir: bool
    scratch: bool = False  # an empty writable tmpfs rather than an unreadable one


def _masks(
    env: Mapping[str, str],
    host_env: Mapping[str, str],
    deny_read: Iterable[str],
    writable: list[str],
) -> list[_Mask]:
    """What to hide, resolved, each once: credential stores, sockets, ``deny_read``; and
    each home's ``.cache`` replaced by scratch (tools' caches; the host's stay unseen)."""
    masks: list[_Mask] = []
    seen: set[str] = set()
    for home in paths.homes(env, host_env):
        cache = os.path.join(home, ".cache")
        if os.path.isdir(cache) and not os.path.islink(cache) and not paths.inside(cache, writable):
            masks.append(_Mask(cache, True, scratch=True))
            seen.add(cache)
        for name in paths.CREDENTIAL_STORES:
            _add_mask(os.path.join(home, name), masks, seen)
    for path in (*deny_read, *paths.socket_paths(host_env)):
        _add_mask(path, masks, seen)
    return masks


def _add_mask(path: str, masks: list[_Mask], seen: set[str]) -> None:
    if not os.path.lexists(path):
        return
    real = os.path.realpath(path)  # a symlinked store is masked where it really is
    if real in seen or not os.path.exists(real) or paths.inside(real, PRIVATE_DIRS):
        return  # (the host's /tmp is not there at all: the sandbox's is a fresh tmpfs)
    masks.append(_Mask(real, os.path.isdir(real)))
    seen.add(real)
