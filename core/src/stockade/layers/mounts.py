"""Forks as overlay mounts on the host: a fork of any size for one ``mount(2)``.

A fork mounted here is an overlay on its folder, ``<store>/workspaces/.forks/SNAP/N/``:
its lower layer the snapshot (read-only, in the store, masked from every sandbox), its
upper and work folders its own, ``<store>/forks/SNAP/N/{upper,work}`` (in the store, outside
its workspaces: hidden from every sandbox, never a writable root). Every reader on the host
(the protected-path survey, the quota, the file tools, exports) sees the merged view through
the mount point; a layered command's commit lands through it (the kernel makes the
whiteouts and copy-ups in the fork's upper); and nothing written through a fork reaches the
snapshot or a sibling, whoever writes (so a direct writer, Landlock, may run in one).

Mounting needs ``CAP_SYS_ADMIN`` in the host's mount namespace (root), a kernel with
overlayfs, and a store the kernel takes as an upper layer that is not an overlay itself
(a command's own layer stacks on the fork: the kernel stacks two overlays at most).
:func:`refusal` says which is missing; the fork is then hard links
(:mod:`stockade.layers.snapshots`).

Hand-written: Python has no ``mount(2)``/``umount2(2)``, and calling ``mount(8)`` would
resolve the paths again by name (the layers are given as ``/proc/self/fd`` links to folders
opened without following a link, and the mount point likewise). No library wraps them for
this (``libmount``'s Python binding is not on PyPI).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import threading

from attrs import frozen

from .. import resolved
from ..confine.roots import OWN_FORKS, OWN_WORKSPACES
from ..trees import remove_tree

MS_NOSUID = 0x2
MS_NODEV = 0x4
MNT_DETACH = 0x2
UMOUNT_NOFOLLOW = 0x8
OPTIONS = "redirect_dir=off,metacopy=off,index=off"
"""Fixed, whatever the kernel's defaults: a landing refuses redirects and metacopies."""
FORKS = os.path.join(OWN_WORKSPACES, OWN_FORKS)
"""Where forks live: among the workspaces of the store, which may be writable roots."""
LAYERS = "forks"
"""The store's folder of forks' own layers (``SNAP/N/{upper,work}``)."""
_CAP_SYS_ADMIN = 21
_PATH = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

_libc: ctypes.CDLL | None = None
_refused: dict[int, str | None] = {}
_lock = threading.Lock()


@frozen
class Mount:
    """One line of ``/proc/self/mountinfo``.

    Attributes:
        point: where it is mounted (unescaped).
        fstype: its file system's type (``overlay``).
    """

    point: str
    fstype: str


def _c() -> ctypes.CDLL:
    global _libc  # noqa: PLW0603 - loaded once, on first use
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _unescape(field: str) -> str:
    """A mountinfo field with its octal escapes (``\\040`` for a space) undone."""
    if "\\" not in field:
        return field
    out, i = bytearray(), 0
    raw = field.encode()
    while i < len(raw):
        if raw[i : i + 1] == b"\\" and raw[i + 1 : i + 4].isdigit():
            out.append(int(raw[i + 1 : i + 4], 8))
            i += 4
        else:
            out.append(raw[i])
            i += 1
    return os.fsdecode(bytes(out))


def mounts() -> list[Mount]:
    """The mounts this process sees, in mount order."""
    found = []
    with open("/proc/self/mountinfo") as info:
        for line in info:
            fields = line.split()
            dash = fields.index("-")
            found.append(Mount(_unescape(fields[4]), fields[dash + 1]))
    return found


def overlays_beneath(folder: str) -> list[str]:
    """The overlay mount points strictly beneath ``folder``, deepest first. ``folder`` is
    taken as given, never resolved: a link in it would name another tree's mounts, so a
    caller resolves (or refuses) its links itself."""
    base = os.path.normpath(folder).rstrip("/") + "/"
    points = {m.point for m in mounts() if m.fstype == "overlay" and m.point.startswith(base)}
    return sorted(points, key=lambda p: (-p.count("/"), p))


def is_overlay(folder: str) -> bool:
    """Whether ``folder`` (resolved) is itself an overlay's mount point."""
    real = resolved.realpath(folder)
    return any(m.point == real and m.fstype == "overlay" for m in reversed(mounts()))


def holding(path: str) -> Mount | None:
    """The mount ``path`` (resolved) lies on."""
    real, best, found = resolved.realpath(path), -1, None
    for m in mounts():
        inside = real == m.point or real.startswith(m.point.rstrip("/") + "/")
        if inside and len(m.point) >= best:
            best, found = len(m.point), m
    return found


def in_fork(path: str, store: str) -> bool:
    """Whether ``path`` lies in a fork of ``store`` mounted as an overlay."""
    found = holding(path)
    base = os.path.join(resolved.realpath(store), FORKS) + "/"
    return found is not None and found.fstype == "overlay" and found.point.startswith(base)


def _fstype(path: str) -> str:
    """The type of the file system ``path`` (resolved) lies on."""
    found = holding(path)
    return found.fstype if found is not None else ""


def _can_mount() -> bool:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> _CAP_SYS_ADMIN & 1)
    return False


def refusal(store: str) -> str | None:
    """Why a fork in ``store`` (made if missing) cannot be an overlay mount (``None``: it
    can); asked once per file system of the store, and remembered.

    Raises:
        OSError: the store cannot be made.
    """
    if not _can_mount():
        return (
            f"mounting an overlay needs CAP_SYS_ADMIN (root), which this process (uid "
            f"{os.getuid()}) lacks: the fork's files are hard links to the snapshot's"
        )
    os.makedirs(store, mode=0o700, exist_ok=True)
    device = os.stat(store).st_dev
    with _lock:
        if device in _refused:
            return _refused[device]
    why = _probe(store)
    with _lock:
        _refused[device] = why
    return why


def _probe(store: str) -> str | None:
    kind = _fstype(store)
    if kind == "overlay":
        return (
            f"the store {store} lies on an overlay (a container's root?): a fork's overlay on "
            "it and a command's own layer above would stack three, past the kernel's two"
        )
    base = os.path.join(store, LAYERS)
    os.makedirs(base, mode=0o700, exist_ok=True)
    trial = os.path.join(base, f".probe-{os.getpid()}-{threading.get_ident()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(trial, 0o700)
    try:
        names = ("lower", "upper", "work", "merged")
        for name in names:
            with contextlib.suppress(FileExistsError):
                os.mkdir(os.path.join(trial, name), 0o700)
        lower, upper, work, merged = (os.path.join(trial, n) for n in names)
        try:
            mount(lower, upper, work, merged)
        except OSError as error:
            return f"the kernel refused an overlay in {store} ({kind}): {error.strerror}"
        unmount(merged)
        return None
    finally:
        _remove(trial)


def _remove(folder: str) -> None:
    remove_tree(folder)  # without recursion, as every removal of a tree here


def mount(lower: str, upper: str, work: str, point: str) -> None:
    """Mount an overlay of ``lower`` under ``upper`` (``work`` its scratch) on ``point``
    (``nosuid``, ``nodev``); each folder opened without following a link, and named to
    the kernel by its descriptor.

    Raises:
        OSError: a folder is missing or a link, or the kernel refused the mount.
    """
    fds: list[int] = []
    try:
        for path in (lower, upper, work, point):
            fds.append(os.open(path, _PATH))
        low, up, wk, at = (f"/proc/self/fd/{fd}" for fd in fds)
        data = f"lowerdir={low},upperdir={up},workdir={wk},{OPTIONS}"
        done = _c().mount(
            b"stockade-fork", at.encode(), b"overlay", MS_NOSUID | MS_NODEV, data.encode()
        )
        if done != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), point)
    finally:
        for fd in fds:
            os.close(fd)


def unmount(point: str) -> bool:
    """Unmount ``point``, lazily when it is busy (a process still in it: detached at once,
    gone when the last one leaves); a folder not mounted is fine. Whether it was detached
    lazily (its layers may still be written: :func:`in_use` says until when).

    Raises:
        OSError: the kernel refused (not ``EINVAL``, a folder that is no mount point).
    """
    for flags in (UMOUNT_NOFOLLOW, UMOUNT_NOFOLLOW | MNT_DETACH):
        if _c().umount2(os.fsencode(point), flags) == 0:
            return bool(flags & MNT_DETACH)
        code = ctypes.get_errno()
        if code in (errno.EINVAL, errno.ENOENT):
            return False
        if code != errno.EBUSY:
            raise OSError(code, os.strerror(code), point)
    return False


def in_use(device: int) -> bool:
    """Whether a process still holds a file of the file system ``device`` (a detached
    overlay's): a working or root folder, an open file or a mapped one, as ``fuser -m``
    finds them (root may look at every process's: only root mounts forks)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        links = [f"/proc/{pid}/{n}" for n in ("cwd", "root")]
        for folder in ("fd", "map_files"):
            with contextlib.suppress(OSError):
                links += [f"/proc/{pid}/{folder}/{n}" for n in os.listdir(f"/proc/{pid}/{folder}")]
        for link in links:
            try:
                if os.stat(link).st_dev == device:
                    return True
            except FileNotFoundError:
                continue  # gone meanwhile
            except OSError:
                continue  # a socket, a pipe, another user's
    return False


__all__ = [
    "Mount",
    "holding",
    "in_fork",
    "in_use",
    "is_overlay",
    "mount",
    "mounts",
    "overlays_beneath",
    "refusal",
    "unmount",
]
