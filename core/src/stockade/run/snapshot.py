"""What a protected path held before a run, and putting it back after (Landlock).

Landlock cannot keep an existing ``.git`` read-only without closing the folder above it to
new entries, so the host reads the protected paths before the command runs and, once it
has exited, quarantines whatever it added or changed there and writes the rest back:
bytes, modes and modification times. A git directory's ``objects`` is left out (its files
are named by their hash). The file operations the quarantine needs live here too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterator

from attrs import frozen

from ..confine import protected
from ..confine.protected import Survey
from ..errors import SandboxUnavailable

# A stamp within this many nanoseconds of the survey may hide a change made in the same
# clock tick (coarse timestamps, 1-2 s on some filesystems): those are compared in full.
RACY_NS = 2_000_000_000


@frozen
class Entry:
    """One thing inside a protected path, as the snapshot saw it.

    Attributes:
        kind: ``dir``, ``file``, ``link`` or ``other`` (kept as it is, never restored).
        mode: its permission bits.
        stamp: inode, size, mtime and ctime.
        data: a file's bytes, a link's target.
    """

    kind: str
    mode: int
    stamp: tuple[int, int, int, int]
    data: bytes | str | None = None


@frozen
class Snapshot:
    """The contents of the read-only protected paths before a run.

    Attributes:
        entries: every path inside them (themselves included), by absolute path.
        skipped: folders left out (a git directory's ``objects``).
        taken: ``time.time_ns()`` when it began.
    """

    entries: dict[str, Entry]
    skipped: frozenset[str]
    taken: int


def outermost(paths: tuple[str, ...]) -> list[str]:
    """``paths`` without those inside another of them, sorted."""
    out: list[str] = []
    for path in sorted(set(paths)):
        if not protected.inside(path, out):
            out.append(path)
    return out


def take(survey: Survey) -> Snapshot:
    """Read every read-only protected path of ``survey`` (a ``.git`` less its objects).

    Raises:
        SandboxUnavailable: the snapshot would pass ``survey.snapshot_limit`` bytes, or a
            file there cannot be read.
    """
    import time

    taken = time.time_ns()
    entries: dict[str, Entry] = {}
    skipped: set[str] = set()
    total = 0
    for top in outermost(survey.read_only):
        for path, info in _walk(top, skipped):
            entry = _entry(path, info)
            if isinstance(entry.data, bytes):
                total += len(entry.data)
                if total > survey.snapshot_limit:
                    raise SandboxUnavailable(
                        f"the protected paths under {top} hold more than "
                        f"{survey.snapshot_limit >> 20} MiB to put back after the run",
                        hint=f"raise {survey.snapshot_setting or 'the snapshot limit'}, move "
                        "large files out of them, or use bubblewrap (which needs no snapshot)",
                        details={"path": top, "snapshot_limit": survey.snapshot_limit},
                    )
            entries[path] = entry
    return Snapshot(entries, frozenset(skipped), taken)


def _walk(top: str, skipped: set[str]) -> Iterator[tuple[str, os.stat_result]]:
    """``top`` and everything beneath it, never through a symlink; a git directory's
    ``objects`` is left out (its files are named by their hash) and added to ``skipped``."""
    try:
        info = os.lstat(top)
    except FileNotFoundError:
        return
    yield top, info
    if not stat.S_ISDIR(info.st_mode):
        return
    stack = [top]
    while stack:
        directory = stack.pop()
        openable(directory)
        try:
            names = sorted(os.listdir(directory))
        except OSError as error:
            raise SandboxUnavailable(
                f"cannot list {directory} to keep it as it is: {error.strerror}",
                hint=f"give it back its permissions (chmod u+rwx {directory})",
                details={"path": directory},
            ) from None
        git = "HEAD" in names
        for name in names:
            path = os.path.join(directory, name)
            if git and name == "objects":
                skipped.add(path)
                continue
            info = os.lstat(path)
            yield path, info
            if stat.S_ISDIR(info.st_mode):
                stack.append(path)


def _entry(path: str, info: os.stat_result) -> Entry:
    stamp = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISDIR(info.st_mode):
        return Entry("dir", mode, stamp)
    if stat.S_ISLNK(info.st_mode):
        return Entry("link", mode, stamp, os.readlink(path))
    if not stat.S_ISREG(info.st_mode):
        return Entry("other", mode, stamp)
    return Entry("file", mode, stamp, _read(path))


def _read(path: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except PermissionError:
        with contextlib.suppress(OSError):
            os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) | stat.S_IRUSR)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as error:
            raise SandboxUnavailable(
                f"cannot read {path} to keep it as it is: {error.strerror}",
                hint=f"give it back its read permission (chmod u+r {path})",
                details={"path": path},
            ) from None
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def _same(path: str, old: Entry, taken: int) -> tuple[bool, bool]:
    """(whether ``path`` still holds what ``old`` recorded, whether only its mode differs)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False, False
    now = _kind(info.st_mode)
    if now != old.kind:
        return False, False
    if now == "file" and info.st_nlink > 1:
        return False, False  # also named outside: writable there, even under bubblewrap
    stamp = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    mode_only = stat.S_IMODE(info.st_mode) != old.mode
    if stamp == old.stamp and info.st_ctime_ns < taken - RACY_NS:
        return not mode_only, mode_only
    if now == "file":
        try:
            same = _read(path) == old.data
        except SandboxUnavailable:
            same = False
    elif now == "link":
        same = os.readlink(path) == old.data
    else:
        same = now == "dir" or stamp == old.stamp
    return same and not mode_only, same and mode_only


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "link"
    return "file" if stat.S_ISREG(mode) else "other"


def restore(
    snapshot: Snapshot, folder: str, moved: list[str], restored: list[str], failed: list[str]
) -> None:
    """Quarantine what was added or changed inside the snapshotted paths; put back the rest."""
    entries = snapshot.entries
    tops = outermost(tuple(entries))
    changed: set[str] = set()
    for top in tops:
        for path, _info in _walk_now(top, snapshot.skipped):
            old = entries.get(path)
            same, mode_only = _same(path, old, snapshot.taken) if old else (False, False)
            if same:
                continue
            changed.add(top)
            if mode_only and old is not None and old.kind != "link":
                os.chmod(path, old.mode)
            elif not mode_only:
                move(path, folder, moved, failed)
    _replaced_objects(snapshot, folder, moved, failed)
    made: list[str] = []
    for path in sorted(entries):  # parents before children
        if os.path.lexists(path):
            continue
        changed.add(next(t for t in tops if protected.inside(path, [t])))
        try:
            parent = os.path.dirname(path)
            if not os.path.lexists(parent):  # a folder above it was renamed away
                os.makedirs(parent, mode=0o700)
            _put(path, entries[path])
            made.append(path)
        except OSError as error:
            failed.append(f"{path}: {error.strerror}")
    for path in sorted(made, reverse=True):  # a folder's mode and time after its entries
        entry = entries[path]
        with contextlib.suppress(OSError):
            if entry.kind == "dir":
                os.chmod(path, entry.mode)
            if entry.kind in ("dir", "file"):
                os.utime(path, ns=(entry.stamp[2], entry.stamp[2]))
    restored += sorted(changed)


def _replaced_objects(snapshot: Snapshot, folder: str, moved: list[str], failed: list[str]) -> None:
    """A skipped ``objects`` folder that is no longer a folder is quarantined too."""
    for skipped in sorted(snapshot.skipped):
        with contextlib.suppress(OSError):
            if not stat.S_ISDIR(os.lstat(skipped).st_mode):
                move(skipped, folder, moved, failed)


def _walk_now(top: str, skipped: frozenset[str]) -> Iterator[tuple[str, os.stat_result]]:
    """:func:`_walk` after the run: the folders skipped before are skipped again."""
    try:
        info = os.lstat(top)
    except OSError:
        return
    yield top, info
    if not stat.S_ISDIR(info.st_mode):
        return
    stack = [top]
    while stack:
        directory = stack.pop()
        openable(directory)
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            if path in skipped:
                continue
            try:
                info = os.lstat(path)
            except OSError:
                continue
            yield path, info
            if stat.S_ISDIR(info.st_mode):
                stack.append(path)


def _put(path: str, entry: Entry) -> None:
    """Make ``path`` again as ``entry`` recorded it."""
    if entry.kind == "dir":
        os.mkdir(path, 0o700)  # its own mode once its entries are back
    elif isinstance(entry.data, str):  # a link
        os.symlink(entry.data, path)
    elif isinstance(entry.data, bytes):  # a file
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(entry.data)
            os.fchmod(handle.fileno(), entry.mode)


def openable(directory: str) -> None:
    """Give a folder of this user back the rights the host needs to list and move in it (a
    command may have taken them away to hide what it planted)."""
    try:
        info = os.lstat(directory)
    except OSError:
        return
    need = stat.S_IRUSR | stat.S_IWUSR | stat.S_IXUSR
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and info.st_mode & need != need:
        with contextlib.suppress(OSError):
            os.chmod(directory, stat.S_IMODE(info.st_mode) | need)


def move(path: str, folder: str, moved: list[str], failed: list[str]) -> None:
    """Move ``path`` (never following it) to ``folder`` + its absolute path."""
    target = os.path.join(folder, path.lstrip("/"))
    try:
        openable(os.path.dirname(path))
        openable(path)
        _private(folder)
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        while os.path.lexists(target):
            target += "~"
        try:
            os.rename(path, target)
        except OSError as error:
            if error.errno != 18:  # EXDEV: another filesystem, so copy then remove
                raise
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.copytree(path, target, symlinks=True)
                shutil.rmtree(path)
            else:
                shutil.copy2(path, target, follow_symlinks=False)
                os.unlink(path)
    except OSError as error:
        failed.append(f"{path}: {error.strerror}")
        _remove(path, failed)
        return
    moved.append(path)


def _private(folder: str) -> None:
    """``folder`` and the quarantine folder holding it, made 0700 (``makedirs`` gives the
    folders it makes on the way the default mode)."""
    parent = os.path.dirname(folder)
    os.makedirs(os.path.dirname(parent), mode=0o700, exist_ok=True)
    for path in (parent, folder):
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        os.chmod(path, 0o700)


def _remove(path: str, failed: list[str]) -> None:
    """Last resort for a path that could not be quarantined: it must not stay."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except OSError as error:
        failed.append(f"{path}: not removed either: {error.strerror}")
