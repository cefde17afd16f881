"""Snapshots of a workspace, forks from them, and exports of a workspace as a tar stream.

The interface is small (:class:`Snapshots`: ``take`` a folder, ``fork_into`` a workspace on
a worker's node), so a node that has layered workspaces forks from a layer instead of a
copy (:class:`~stockade_ray.layered.LayeredSnapshots`, the pool's default). The copy,
:class:`CopySnapshots`: a snapshot is a tar archive of the folder (regular files, folders
and symbolic links; nothing else), made once on the driver and put in Ray's object store,
and a fork unpacks it into the episode's workspace on its worker's node.

Unpacking never writes through a link: the target folder is new and empty, files are made
with ``O_EXCL | O_NOFOLLOW`` below folders made here, and the links are made last. A member
naming an absolute path, a ``..``, or anything but a file, a folder or a link is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Iterator, Mapping
from typing import Literal, Protocol

import attrs

from stockade.errors import StockadeError, UsageError
from stockade.trees import walk

EXPORT_BYTES = 256 * 1024 * 1024
"""The most an export holds unless told otherwise."""


class TooLarge(StockadeError):
    """A snapshot or an export would hold more than its cap; nothing was given back."""

    code = "too_large"


@attrs.frozen
class Snapshot:
    """A workspace as it was when taken.

    Attributes:
        digest: the sha256 of its archive (what the record names a fork by).
        files: how many files it holds.
        size: its archive's size in bytes.
        data: where its archive is (a Ray object reference for :class:`CopySnapshots`).
    """

    digest: str
    files: int
    size: int
    data: object = attrs.field(repr=False, eq=False)


@attrs.frozen
class Export:
    """A workspace, or its changes since its fork, as a tar stream.

    Attributes:
        data: the tar archive (regular files, folders, links).
        files: the files in it.
        deleted: for changes only: the files of the snapshot that are gone.
    """

    data: bytes = attrs.field(repr=False)
    files: tuple[str, ...]
    deleted: tuple[str, ...] = ()


@attrs.frozen
class Forked:
    """How one episode's workspace was forked (``Episode.forked``).

    Attributes:
        workspace: where it is (on its worker's node).
        method: ``overlay`` (an overlay mounted over the node's layers' snapshot: one
            mount), ``layers`` (hard links to that snapshot: no copy) or ``copy``.
        why: why not the method before it (``""`` for an overlay).
        files: the files it holds.
        base: for ``overlay`` and ``layers``, the snapshot's folder on the node (what its
            changes are measured against); ``""`` for a copy.
    """

    workspace: str
    method: Literal["overlay", "layers", "copy"]
    why: str = ""
    files: int = 0
    base: str = ""


class Snapshots(Protocol):
    """What forks need: a snapshot of a folder, and a fork of it on a worker's node."""

    def take(self, folder: str, *, cap: int) -> Snapshot:
        """The folder as it is now."""

    def fork_into(
        self, snapshot: Snapshot, into: str, *, store: str, pool: str, refusal: str | None
    ) -> Forked:
        """A workspace holding what ``snapshot`` holds, run on the worker's node: ``into``
        (new or empty) or another folder it names; ``refusal`` says why this node's steps
        would not write through layers (``None``: they would); ``pool`` names the pool."""


class CopySnapshots:
    """Snapshots as tar archives in Ray's object store; a fork unpacks a copy."""

    def take(self, folder: str, *, cap: int) -> Snapshot:
        import ray

        archive = pack(folder, cap=cap)
        files = sum(1 for member in _members(archive) if member.isfile())
        digest = hashlib.sha256(archive).hexdigest()
        return Snapshot(digest, files, len(archive), ray.put(archive))

    def fork_into(
        self,
        snapshot: Snapshot,
        into: str,
        *,
        store: str,
        pool: str,
        refusal: str | None,
    ) -> Forked:
        return copy_into(snapshot, into, why="a copy was asked for (CopySnapshots)")


def copy_into(snapshot: Snapshot, into: str, *, why: str) -> Forked:
    """``into`` (new or empty) holding a copy of the snapshot's archive."""
    import ray

    archive = snapshot.data if isinstance(snapshot.data, bytes) else ray.get(snapshot.data)
    return Forked(into, "copy", why, unpack(archive, into))


def _walk(folder: str) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry below ``folder`` (not following links), as a relative path and its stat;
    without recursion, however deep a command made it (none past ``PATH_MAX``: no path
    names it)."""
    for visit in walk(folder):
        if visit.rel is None:
            visit.folders.clear()
            continue
        for name in (*visit.folders, *visit.others):
            rel = f"{visit.rel}/{name}" if visit.rel else name
            yield rel, os.stat(name, dir_fd=visit.fd, follow_symlinks=False)


def pack(folder: str, *, cap: int, only: Mapping[str, str] | None = None) -> bytes:
    """``folder`` as a tar archive (regular files, folders and links; others are skipped).
    With ``only``, the files whose sha256 differs from it (new or changed) and no folders.

    Raises:
        TooLarge: the archive would hold more than ``cap`` bytes.
    """
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, info in _walk(folder):
            path = os.path.join(folder, rel)
            if stat.S_ISREG(info.st_mode):
                with open(path, "rb") as handle:
                    content = handle.read()
                if only is not None and only.get(rel) == hashlib.sha256(content).hexdigest():
                    continue
                member = tarfile.TarInfo(rel)
                member.size, member.mode, member.mtime = len(content), info.st_mode & 0o777, 0
                tar.addfile(member, io.BytesIO(content))
            elif stat.S_ISDIR(info.st_mode) and only is None:
                member = tarfile.TarInfo(rel)
                member.type, member.mode = tarfile.DIRTYPE, info.st_mode & 0o777
                tar.addfile(member)
            elif stat.S_ISLNK(info.st_mode):
                member = tarfile.TarInfo(rel)
                member.type, member.linkname = tarfile.SYMTYPE, os.readlink(path)
                tar.addfile(member)
            if out.tell() > cap:
                raise TooLarge(
                    f"{folder} holds more than {cap} bytes",
                    hint="raise the cap, or export the changes only",
                    details={"cap": cap},
                )
    return out.getvalue()


def manifest(folder: str) -> dict[str, str]:
    """The sha256 of every regular file below ``folder``, by relative path."""
    found = {}
    for rel, info in _walk(folder):
        if stat.S_ISREG(info.st_mode):
            with open(os.path.join(folder, rel), "rb") as handle:
                found[rel] = hashlib.sha256(handle.read()).hexdigest()
    return found


def _members(archive: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
        return tar.getmembers()


def _checked(name: str) -> str:
    parts = name.split("/")
    if name.startswith("/") or not name or any(p in ("", ".", "..") for p in parts):
        raise UsageError(f"an archive member is named {name!r}", hint="a relative path only")
    return name


def unpack(archive: bytes, into: str) -> int:
    """Make ``into`` (new, or an empty folder) hold the archive; the files written.

    Raises:
        UsageError: a member is not a relative path, or not a file, folder or link.
    """
    try:
        os.mkdir(into, 0o700)
    except FileExistsError:
        if os.listdir(into):
            raise UsageError(f"{into} is not empty, so it cannot become a fork") from None
    top = os.open(into, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    links: list[tarfile.TarInfo] = []
    written = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
            for member in tar:
                name = _checked(member.name)
                if member.issym():
                    links.append(member)
                elif member.isdir():
                    _make_dirs(top, name)
                elif member.isfile():
                    source = tar.extractfile(member)
                    _write(top, name, source.read() if source else b"", member.mode)
                    written += 1
                else:
                    raise UsageError(f"archive member {name!r} is not a file, folder or link")
        for member in links:  # last: nothing is written through them
            name = _checked(member.name)
            parent = _make_dirs(top, os.path.dirname(name))
            try:
                os.symlink(member.linkname, os.path.basename(name), dir_fd=parent)
            finally:
                if parent != top:
                    os.close(parent)
    finally:
        os.close(top)
    return written


def _write(top: int, name: str, content: bytes, mode: int) -> None:
    """A new file ``name`` below ``top``, never through a link."""
    parent = _make_dirs(top, os.path.dirname(name))
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(os.path.basename(name), flags, mode & 0o755, dir_fd=parent)
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
    finally:
        if parent != top:
            os.close(parent)


def _make_dirs(top: int, rel: str) -> int:
    """The folder ``rel`` below ``top`` (made where missing, never through a link), open."""
    fd = top
    for part in [p for p in rel.split("/") if p]:
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, 0o700, dir_fd=fd)
        child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        if fd != top:
            os.close(fd)
        fd = child
    return fd


def export(folder: str, *, cap: int, base: Mapping[str, str] | None = None) -> Export:
    """``folder`` as a tar stream; with ``base`` (a fork's :func:`manifest`), its changes.

    Raises:
        TooLarge: more than ``cap`` bytes.
    """
    archive = pack(folder, cap=cap, only=base)
    files = tuple(m.name for m in _members(archive) if m.isfile())
    deleted: tuple[str, ...] = ()
    if base is not None:
        now = manifest(folder)
        deleted = tuple(sorted(set(base) - set(now)))
    return Export(archive, files, deleted)
