"""Landing an entry across filesystems: a copy beside its name, then a rename over it.

A layer lands by ``rename(2)``, which cannot cross filesystems. A fork mounted as an overlay
(:mod:`~stockade.layers.mounts`) is its own filesystem, and every folder on it lies inside
the fork, so a command's layer there lives under the store, on another one
(:mod:`~stockade.layers.place`). Each entry it brings is then copied into a new name in the
same folder of the root (made with ``O_EXCL | O_NOFOLLOW`` through that folder's descriptor:
never through a link), given the entry's mode, owner (where this user may) and times, and
renamed over the name: other programs see the old entry or the new, never half of one.
A setuid or setgid bit never lands (:data:`SAFE`), nor do file capabilities, here or by a
rename (:func:`drop_privileges`). The cost is one copy of each file the command changed,
never of the workspace, and of its data alone: a sparse file keeps its holes
(``SEEK_DATA``/``SEEK_HOLE``), so it takes in the fork the blocks the quota counted
(``st_blocks``), not its size. Hard links within the layer land as separate files. Only
files and symbolic links are carried; a fifo, socket or device is refused (``OSError``),
named in the commit's ``failed``.

Hand-written: :func:`shutil.copy2` works by path and follows nothing safely from a folder
descriptor; this is the descriptor-relative half of it the commit needs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAKE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
SAFE = 0o1777
"""The mode bits a file keeps when it lands: a command's setuid or setgid bit never does
(root's sandboxed ``chmod 4755`` would land a setuid-root program in the workspace)."""
CAPABILITY = "security.capability"
"""File capabilities: they never land either (a copy carries no extended attribute)."""
PREFIX = ".stockade-landing-"
"""The name a carried entry has in the root until its rename."""


def carry(up: int, dst: int, name: str) -> None:
    """Move entry ``name`` of folder ``up`` over ``name`` in folder ``dst`` (another
    filesystem), as ``rename`` would.

    Raises:
        OSError: it is not a file or a link, or the copy failed (the root keeps its entry).
    """
    info = os.stat(name, dir_fd=up, follow_symlinks=False)
    temp = PREFIX + secrets.token_hex(8)
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(name, dir_fd=up), temp, dir_fd=dst)
    elif stat.S_ISREG(info.st_mode):
        _copy(up, dst, name, temp, info)
    else:
        raise OSError(errno.EXDEV, "only files and links land across filesystems", name)
    try:
        if stat.S_ISLNK(info.st_mode):  # (a file's owner and mode are set as it is copied)
            with contextlib.suppress(PermissionError):  # another user's link, not as root
                os.chown(temp, info.st_uid, info.st_gid, dir_fd=dst, follow_symlinks=False)
        os.utime(temp, ns=(info.st_atime_ns, info.st_mtime_ns), dir_fd=dst, follow_symlinks=False)
        os.rename(temp, name, src_dir_fd=dst, dst_dir_fd=dst)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dst)
        raise
    os.unlink(name, dir_fd=up)


def drop_privileges(folder: int, name: str) -> None:
    """Clear the setuid and setgid bits and the file capabilities (``security.capability``)
    of file ``name`` of ``folder`` (a descriptor), reached without following a link;
    anything else is left as it is. A command can keep a privileged program's bits and
    capabilities while it rewrites it through a shared memory map (``write`` would drop
    them); what lands is never privileged.

    Raises:
        OSError: the capabilities could not be removed (the file must not land).
    """
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            return
        if mode & (stat.S_ISUID | stat.S_ISGID):
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(mode) & SAFE)  # this very inode
        # Looked for first: removing one needs CAP_SETFCAP even where there is none.
        if capable(f"/proc/self/fd/{fd}"):
            os.removexattr(f"/proc/self/fd/{fd}", CAPABILITY)
    finally:
        os.close(fd)


def capable(path: str) -> bool:
    """Whether the file ``path`` leads to (followed: a ``/proc/self/fd/N``) has file
    capabilities (:data:`CAPABILITY`)."""
    try:
        os.getxattr(path, CAPABILITY)
    except OSError as error:
        if error.errno in (errno.ENODATA, errno.ENOTSUP):
            return False
        raise
    return True


def _copy(up: int, dst: int, name: str, temp: str, info: os.stat_result) -> None:
    source = os.open(name, _READ, dir_fd=up)
    try:
        target = os.open(temp, _MAKE, 0o600, dir_fd=dst)
        try:
            _data(source, target, os.fstat(source).st_size)
            # Owner, then mode (a chown clears setid bits), through its own descriptor: the
            # name could be a link by now.
            with contextlib.suppress(PermissionError):  # another user's file, not as root
                os.fchown(target, info.st_uid, info.st_gid)
            os.fchmod(target, stat.S_IMODE(info.st_mode) & SAFE)  # never setuid/setgid
        except BaseException:
            os.close(target)
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dst)
            raise
        os.close(target)
    finally:
        os.close(source)


def _data(source: int, target: int, size: int) -> None:
    """Copy the ``size`` bytes of file ``source`` into the empty file ``target``, holes kept:
    only the data (``SEEK_DATA`` to ``SEEK_HOLE``) is written, at its offset, and the size set
    last. A sparse file then takes in the root the blocks it took in the layer, which is what
    the quota counted (``st_blocks``), not its whole size. Where the filesystem cannot say
    (``EINVAL``), everything left is copied as data."""
    offset = 0
    while offset < size:
        try:
            start = os.lseek(source, offset, os.SEEK_DATA)
            end = min(os.lseek(source, start, os.SEEK_HOLE), size)
        except OSError as error:
            if error.errno == errno.ENXIO:
                break  # no data past ``offset``: a hole to the end
            if error.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
            start, end = offset, size
        if _sent(source, target, start, end) < end:
            break  # the file is shorter than it was: its end is what it holds
        offset = end
    os.ftruncate(target, size)


def _sent(source: int, target: int, start: int, end: int) -> int:
    """Copy bytes ``start`` to ``end`` of ``source`` to the same offsets of ``target``; the
    offset it reached (less than ``end`` where ``source`` ended first)."""
    os.lseek(target, start, os.SEEK_SET)
    while start < end:
        sent = os.sendfile(target, source, start, min(end - start, 1 << 30))
        if sent == 0:
            break
        start += sent
    return start
