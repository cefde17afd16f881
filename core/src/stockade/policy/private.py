"""Private data as a capability: the paths a step cannot open unless it is granted them.

A profile's ``private`` globs (relative to the workspace root, whatever folder the step runs
in; or absolute) and the files the sidecar marks (:class:`~stockade.record.taint.PrivateFiles`)
are found on disk when a step is decided (:func:`find`), resolved, and handed to the sandbox
in :attr:`~stockade.request.spec.ExecSpec.private_data`: bubblewrap masks each one, Landlock
grants no access to it. A step granted them (:func:`grant`: ``--read-private``, MCP's
``read_private``, the profile's ``private_readers``; ``danger-full-access`` has nothing to
mask) sees them, and its run holds private data from then on. So whether a run holds private
data depends on what the kernel let its steps open, never on how their argv spells a path.

Globs follow :func:`fnmatch.fnmatchcase` (``*`` matches ``/`` too). What a glob matches is
masked whole (a matched folder and everything in it); the walk does not go below a match, and
goes into a folder only when some glob could match beneath it. A hard link to a private file
inside the workspace is masked too (another name of the same data), found by its inode.

A folder's matches are remembered while its change time stays (:mod:`stockade.policy.walk`):
a later step, of this process or (with the store's memory folder) of the next one, stats each
folder it walks instead of listing it again, and lists again only the folders whose entries
changed.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import attrs
from attrs import frozen

from .. import resolved
from ..errors import SandboxUnavailable, UsageError
from ..trees import again, nameable
from ..trees import walk as walk_tree
from .walk import walk

if TYPE_CHECKING:
    from ..request.spec import ExecSpec, Profile

__all__ = ["Found", "find", "for_step", "grant", "refuse_read"]

SHOWN = 3
"""How many private paths a taint's detail names before it counts the rest."""


@frozen
class Found:
    """The private data a step would see.

    Attributes:
        paths: resolved paths, each once, outer ones only: what the sandbox must hide.
        shown: the same, as a person reads them (relative to the workspace when inside it).
    """

    paths: tuple[str, ...]
    shown: tuple[str, ...]


def find(
    workspace: str, globs: Iterable[str], marked: Iterable[str] = (), *, memory: str | None = None
) -> Found:
    """The private paths of ``workspace`` (its real path) that exist now: what ``globs``
    match, and ``marked`` (relative paths the sidecar marks), with the hard links inside the
    workspace to any private file among them. ``memory``: a folder no command can write
    where what each folder matched is kept between processes (:mod:`stockade.policy.walk`)."""
    relative = [g for g in globs if not g.startswith("/")]
    absolute = [g for g in globs if g.startswith("/")]
    hits: dict[str, None] = {}  # to resolve
    found: dict[str, None] = {}  # real already: found walking a real folder, not a symlink
    if relative:
        walk(workspace, "", relative, found, hits, memory=memory)
    for glob in absolute:
        start = _literal_folder(glob)
        if os.path.isdir(start) and start == resolved.realpath(start):
            walk(start, start.rstrip("/") + "/" if start != "/" else "/", [glob], found, hits)
        elif os.path.lexists(start) and fnmatch.fnmatchcase(start, glob):
            hits.setdefault(start, None)
        elif os.path.isdir(start):  # reached through a symlink: matched by letters, resolved
            walk(start, start.rstrip("/") + "/", [glob], hits, hits)
    for name in marked:
        path = nameable(os.path.join(workspace, name))  # too deep for a path: a folder above
        if os.path.lexists(path):
            hits.setdefault(path, None)
    walked = (_reachable(nameable(path)) for path in found)  # (a folder it may not search)
    found = {path: None for path in walked if path is not None}
    real = list(dict.fromkeys((*found, *_resolved(nameable(path) for path in hits))))
    real = _with_links(workspace, real)
    outer = _outer(real)
    return Found(tuple(outer), tuple(_show(p, workspace) for p in outer))


def for_step(
    spec: ExecSpec,
    profile: Profile,
    workspace: str,
    marked: Iterable[str],
    *,
    held: bool = False,
    memory: str | None = None,
) -> tuple[ExecSpec, str | None]:
    """``spec`` with the private data it must not see (``private_data``), and ``None``; or,
    granted, ``spec`` as it is and what it was granted, in words (a ``grant`` taint's detail).

    Raises:
        UsageError: its working folder is private data it is not granted.
    """
    found = find(workspace, profile.private, marked, memory=memory)
    if not found.paths:
        return spec, None
    why = grant(
        spec.argv[0],
        spec.program,
        spec.mode,
        asked=spec.read_private,
        readers=profile.private_readers,
        held=held,
    )
    if why is not None:
        more = f" and {len(found.shown) - SHOWN} more" if len(found.shown) > SHOWN else ""
        return spec, f"{why}: {', '.join(found.shown[:SHOWN])}{more}"
    cwd = resolved.realpath(spec.cwd)
    inside = [p for p in found.paths if cwd == p or cwd.startswith(p.rstrip("/") + "/")]
    if inside:
        raise UsageError(
            f"the working folder {spec.cwd} is private data ({inside[0]})",
            hint="work in another folder, or grant this command the private paths with "
            "--read-private (its run then holds private data)",
            details={"cwd": spec.cwd, "private": inside[0]},
        )
    return attrs.evolve(spec, private_data=found.paths), None


def refuse_read(root: str, path: str, found: Found) -> None:
    """Refuse a file tool's read of ``path`` (relative to ``root``) when it is, or lies in,
    private data the tool is not granted: by the path resolved, and by the file's identity
    (another name of the same data).

    Raises:
        PolicyDenied: it is private data.
    """
    from ..errors import PolicyDenied

    target = resolved.realpath(os.path.join(root, path.lstrip("/")))
    hit = next(
        (p for p in found.paths if target == p or target.startswith(p.rstrip("/") + "/")), None
    )
    if hit is None:
        try:
            st = os.stat(target)
        except OSError:
            return
        for private in found.paths:
            with contextlib.suppress(OSError):
                other = os.stat(private)
                if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                    hit = private
                    break
    if hit is not None:
        raise PolicyDenied(
            f"{path} is private data ({_show(hit, root)}): the file tools do not read it "
            "unless granted",
            hint="a person grants it with --read-private (MCP: read_private); the run then "
            "holds private data",
            details={"path": path, "private": _show(hit, root)},
        )


def grant(
    argv0: str,
    program: str,
    mode: str,
    *,
    asked: bool,
    readers: Iterable[str],
    held: bool = False,
) -> str | None:
    """Why a step sees the private data, or ``None`` (it is masked): ``--read-private``
    (``asked``), a program the profile's ``private_readers`` names (by name or path),
    ``danger-full-access`` (nothing is confined, so nothing is masked), or a run that holds
    private data already (``held``: seeing more adds nothing the breaker does not know)."""
    if mode == "danger-full-access":
        return "danger-full-access"
    if asked:
        return "read-private"
    names = {argv0, program, os.path.basename(program), os.path.basename(argv0)}
    for reader in readers:
        if reader in names:
            return f"private_readers {reader}"
    return "the run holds private data already" if held else None


def _literal_folder(glob: str) -> str:
    """The deepest folder of an absolute glob before its first wildcard."""
    cut = min((i for i, c in enumerate(glob) if c in "*?["), default=len(glob))
    if cut == len(glob):
        return glob
    return os.path.dirname(glob[:cut]) or "/"


def _resolved(hits: Iterable[str]) -> list[str]:
    """Each path resolved (the data a symlink names is what is private), if it exists
    (:func:`_reachable`)."""
    found: dict[str, None] = {}
    for path in hits:
        real = _reachable(resolved.realpath(path))
        if real is not None:
            found.setdefault(real, None)
    return list(found)


def _reachable(path: str) -> str | None:
    """``path`` if the host can look at it; the deepest folder above it that the host can,
    where a folder on the way may not be searched (a command made it ``600``: a host that is
    not root sees nothing in it, a sandbox could not hide what is in it by name, and the
    command can give itself the right back); ``None`` where it is gone."""
    probe = path
    while True:
        try:
            os.lstat(probe)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            above = os.path.dirname(probe)
            if above == probe:
                return None
            probe = above
            continue
        return probe


def _with_links(workspace: str, paths: list[str]) -> list[str]:
    """``paths``, and every other name inside ``workspace`` of a private file that has more
    than one (a hard link made before: the same data under an innocent name)."""
    inodes: set[tuple[int, int]] = set()
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not os.path.isdir(path) and st.st_nlink > 1:
            inodes.add((st.st_dev, st.st_ino))
    if not inodes:
        return paths
    try:  # a search a moved folder cut short could have missed one: searched again
        return again(lambda: list(dict.fromkeys((*paths, *_links(workspace, inodes)))))
    except OSError:
        raise SandboxUnavailable(
            f"the workspace {workspace} kept changing while it was searched for other names "
            "of its private files: the step cannot be kept from them",
            hint="run the step again once nothing else moves folders in the workspace",
            details={"workspace": workspace},
        ) from None


def _links(workspace: str, inodes: set[tuple[int, int]]) -> Iterator[str]:
    """Each name inside ``workspace`` of a file in ``inodes``; one deeper than a path can
    name as the deepest folder above it that one can (:func:`~stockade.trees.nameable`).
    By descriptors, without recursion, past ``PATH_MAX`` too: a command may have left a tree
    of any depth here, and a hard link at its bottom is the same data.

    Raises:
        OSError: a folder moved while it was walked (the search is cut short).
    """
    named: list[str] = []  # the deepest nameable folder of each level of the walk's chain
    shut: list[str] = []  # folders it has no right to enter: what they hold is unknown

    def refused(depth: int, name: str) -> None:
        shut.append(nameable(os.path.join(named[depth], name)))

    for visit in walk_tree(resolved.realpath(workspace), refused=refused):
        del named[visit.depth :]
        rel = visit.rel
        here = None if rel is None else os.path.join(workspace, rel) if rel else workspace
        named.append(named[-1] if here is None else nameable(here))  # (past PATH_MAX: above)
        for name in visit.others:
            try:
                st = os.stat(name, dir_fd=visit.fd, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone since it was listed
            except OSError:  # listed but not to be looked at (a folder made 600): hidden
                yield named[-1]
                break
            if (st.st_dev, st.st_ino) in inodes:
                yield named[-1] if here is None else nameable(os.path.join(here, name))
    yield from shut  # hidden whole (a command could give itself the right back)


def _outer(paths: Iterable[str]) -> list[str]:
    """``paths`` sorted, less those inside another (masking the outer one hides them)."""
    kept: list[str] = []
    for path in sorted(paths):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def _show(path: str, workspace: str) -> str:
    if path.startswith(workspace.rstrip("/") + "/"):
        return path[len(workspace.rstrip("/")) + 1 :]
    return path
