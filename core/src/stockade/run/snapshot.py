"""What a protected path held before a run, and putting it back after (Landlock).

Landlock cannot keep an existing ``.git`` read-only without closing the folder above it to
new entries, so the host reads the protected paths before the command runs and, once it
has exited, quarantines whatever it added or changed there and writes the rest back:
bytes, modes and modification times. A git directory's ``objects`` is left out (its files
are named by their hash). Every write, move and mode change goes through folder
descriptors opened from the writable root without following a link
(:mod:`stockade.run.beneath`): a protected path whose way there was swapped for a symlink
is left alone and named in ``failed``, never written through.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator

from attrs import frozen

from ..confine import protected
from ..confine.protected import Survey
from ..errors import SandboxUnavailable
from . import beneath
from .beneath import Swapped

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
        for path, entry in _walk(top, skipped, survey.roots):
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


def _walk(top: str, skipped: set[str], roots: tuple[str, ...]) -> Iterator[tuple[str, Entry]]:
    """``top`` and everything beneath it, never through a symlink: each folder is opened
    from the root without following a link and each entry read through its folder's
    descriptor, so a folder swapped for a link meanwhile is refused, never read beyond. A
    git directory's ``objects`` is left out (its files are named by their hash) and added
    to ``skipped``."""
    try:
        with beneath.parent(top, roots) as (fd, name):
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            first = _entry(fd, name, top, info)
    except FileNotFoundError:
        return
    except Swapped as error:
        raise _swapped(top, error) from None
    yield top, first
    if first.kind != "dir":
        return
    stack = [top]
    while stack:
        directory = stack.pop()
        beneath.openable(directory, roots)
        try:
            listed = _folder(directory, roots)
        except Swapped as error:
            raise _swapped(directory, error) from None
        except OSError as error:
            raise SandboxUnavailable(
                f"cannot list {directory} to keep it as it is: {error.strerror}",
                hint=f"give it back its permissions (chmod u+rwx {directory})",
                details={"path": directory},
            ) from None
        git = any(name == "HEAD" for name, _ in listed)
        for name, entry in listed:
            path = os.path.join(directory, name)
            if git and name == "objects":
                skipped.add(path)
                continue
            yield path, entry
            if entry.kind == "dir":
                stack.append(path)


def _folder(directory: str, roots: tuple[str, ...]) -> list[tuple[str, Entry]]:
    """The entries of ``directory`` (their files read, ``objects`` not entered), in order."""
    with beneath.parent(directory, roots) as (at, own):
        fd = os.open(own, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=at)
    try:
        names = sorted(os.listdir(fd))
        git = "HEAD" in names
        out = []
        for name in names:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if git and name == "objects":
                out.append((name, Entry("dir", 0, (0, 0, 0, 0))))
                continue
            out.append((name, _entry(fd, name, os.path.join(directory, name), info)))
        return out
    finally:
        os.close(fd)


def _swapped(path: str, error: OSError) -> SandboxUnavailable:
    return SandboxUnavailable(
        f"the way to protected path {path} goes through a symlink ({error.strerror}); "
        "refusing to keep what lies beyond it",
        hint="replace the symlink with the folder itself, then run again",
        details={"path": path},
    )


def _entry(fd: int, name: str, path: str, info: os.stat_result) -> Entry:
    """What ``name`` inside folder ``fd`` (shown as ``path``) holds."""
    stamp = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISDIR(info.st_mode):
        return Entry("dir", mode, stamp)
    if stat.S_ISLNK(info.st_mode):
        return Entry("link", mode, stamp, os.readlink(name, dir_fd=fd))
    if not stat.S_ISREG(info.st_mode):
        return Entry("other", mode, stamp)
    return Entry("file", mode, stamp, _read_at(fd, name, path))


def _read_at(fd: int, name: str, path: str) -> bytes:
    """The bytes of file ``name`` inside folder ``fd``, never following a link (its owner's
    read right given back first when a command took it away)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        own = os.open(name, flags, dir_fd=fd)
    except PermissionError:
        with contextlib.suppress(OSError):
            handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            try:
                info = os.fstat(handle)
                if stat.S_ISREG(info.st_mode):
                    os.chmod(f"/proc/self/fd/{handle}", stat.S_IMODE(info.st_mode) | stat.S_IRUSR)
            finally:
                os.close(handle)
        try:
            own = os.open(name, flags, dir_fd=fd)
        except OSError as error:
            raise SandboxUnavailable(
                f"cannot read {path} to keep it as it is: {error.strerror}",
                hint=f"give it back its read permission (chmod u+r {path})",
                details={"path": path},
            ) from None
    with os.fdopen(own, "rb") as handle_file:
        return handle_file.read()


def _read(path: str, roots: tuple[str, ...]) -> bytes:
    """The bytes of file ``path``, reached without following a link."""
    with beneath.parent(path, roots) as (fd, name):
        return _read_at(fd, name, path)


def _same(
    path: str, old: Entry, taken: int, roots: tuple[str, ...], seen: os.stat_result
) -> tuple[bool, bool]:
    """(whether ``path`` still holds what ``old`` recorded, whether only its mode differs),
    read without following a link (a way there swapped for one: not the same).

    ``seen`` (its status as the walk found it) answers alone when it is the very file
    recorded, unchanged (inode, size, times, mode): that holds however it was reached."""
    unchanged = _stamp(seen) == old.stamp and seen.st_ctime_ns < taken - RACY_NS
    unchanged &= stat.S_IMODE(seen.st_mode) == old.mode and _kind(seen.st_mode) == old.kind
    if unchanged and (old.kind != "file" or seen.st_nlink == 1):
        return True, False
    try:
        info = beneath.lstat(path, roots)
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
            same = _read(path, roots) == old.data
        except (SandboxUnavailable, OSError):
            same = False
    elif now == "link":
        try:
            with beneath.parent(path, roots) as (fd, name):
                same = os.readlink(name, dir_fd=fd) == old.data
        except OSError:
            same = False
    else:
        same = now == "dir" or stamp == old.stamp
    return same and not mode_only, same and mode_only


def _stamp(info: os.stat_result) -> tuple[int, int, int, int]:
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "link"
    return "file" if stat.S_ISREG(mode) else "other"


def restore(
    snapshot: Snapshot,
    folder: str,
    moved: list[str],
    restored: list[str],
    failed: list[str],
    *,
    roots: tuple[str, ...],
) -> None:
    """Quarantine what was added or changed inside the snapshotted paths; put back the rest.

    A path reached through a folder now swapped for a symlink is left alone, with the
    reason in ``failed``: nothing is read, moved or written beyond the link."""
    entries = snapshot.entries
    tops = outermost(tuple(entries))
    changed: set[str] = set()
    cut: set[str] = set()  # tops whose way there is no longer all folders
    for top in tops:
        try:
            beneath.exists(top, roots)
        except Swapped as error:
            failed.append(f"{top}: {error.strerror}")
            cut.add(top)
            continue
        for path, info in _walk_now(top, snapshot.skipped, roots):
            old = entries.get(path)
            if old is None:
                same, mode_only = False, False
            else:
                same, mode_only = _same(path, old, snapshot.taken, roots, info)
            if same:
                continue
            changed.add(top)
            if mode_only and old is not None and old.kind != "link":
                try:
                    beneath.chmod(path, old.mode, roots)
                except OSError as error:
                    failed.append(f"{path}: {error.strerror}")
            elif not mode_only:
                beneath.move(path, folder, roots, moved, failed)
    _replaced_objects(snapshot, folder, moved, failed, roots)
    _put_back(snapshot, tops, cut=cut, changed=changed, failed=failed, roots=roots)
    restored += sorted(changed)


def _put_back(
    snapshot: Snapshot,
    tops: list[str],
    *,
    cut: set[str],
    changed: set[str],
    failed: list[str],
    roots: tuple[str, ...],
) -> None:
    """Make again every snapshotted path that is missing, under the tops not ``cut``."""
    entries = snapshot.entries
    made: list[str] = []
    for path in sorted(entries):  # parents before children
        top = next(t for t in tops if protected.inside(path, [t]))
        if top in cut:
            continue
        if os.path.lexists(path):  # there, or beyond a link: nothing to make either way
            continue
        try:
            if beneath.exists(path, roots):
                continue
            changed.add(top)
            with beneath.parent(path, roots, make=True) as (fd, name):
                _put(fd, name, entries[path])  # makes a folder above renamed away
            made.append(path)
        except OSError as error:
            failed.append(f"{path}: {error.strerror}")
    for path in sorted(made, reverse=True):  # a folder's mode and time after its entries
        entry = entries[path]
        with contextlib.suppress(OSError):
            if entry.kind == "dir":
                beneath.chmod(path, entry.mode, roots)
            if entry.kind in ("dir", "file"):
                with beneath.parent(path, roots) as (fd, name):
                    times = (entry.stamp[2], entry.stamp[2])
                    os.utime(name, ns=times, dir_fd=fd, follow_symlinks=False)


def _replaced_objects(
    snapshot: Snapshot, folder: str, moved: list[str], failed: list[str], roots: tuple[str, ...]
) -> None:
    """A skipped ``objects`` folder that is no longer a folder is quarantined too."""
    for skipped in sorted(snapshot.skipped):
        with contextlib.suppress(OSError):
            if not stat.S_ISDIR(beneath.lstat(skipped, roots).st_mode):
                beneath.move(skipped, folder, roots, moved, failed)


def _walk_now(
    top: str, skipped: frozenset[str], roots: tuple[str, ...]
) -> Iterator[tuple[str, os.stat_result]]:
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
        beneath.openable(directory, roots)
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


def _put(fd: int, name: str, entry: Entry) -> None:
    """Make ``name`` inside folder ``fd`` again as ``entry`` recorded it."""
    if entry.kind == "dir":
        os.mkdir(name, 0o700, dir_fd=fd)  # its own mode once its entries are back
    elif isinstance(entry.data, str):  # a link
        os.symlink(entry.data, name, dir_fd=fd)
    elif isinstance(entry.data, bytes):  # a file
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.open(name, flags, 0o600, dir_fd=fd)
        with os.fdopen(out, "wb") as handle:
            handle.write(entry.data)
            os.fchmod(handle.fileno(), entry.mode)
