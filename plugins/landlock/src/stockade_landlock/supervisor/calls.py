"""Each notified call, performed by the supervisor for its caller, or refused.

A handler reads the call's paths once, resolves them as the kernel would for the caller
(:mod:`.resolve`), refuses what :class:`~.rules.Rules` refuses (``EROFS``), and otherwise
makes the call itself, on the folder it resolved and the last name: never by the path
again, so nothing the caller changes after the check is looked at. An open hands back a
descriptor (``SECCOMP_IOCTL_NOTIF_ADDFD``). The supervisor runs in the caller's Landlock
domain, so its own call gets exactly the caller's rights: whatever Landlock refuses the
caller, it refuses the supervisor.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
import time
from collections.abc import Callable

from stockade.confine import protected
from stockade.confine.protected import GIT
from stockade.layers.across import capable

from . import kernel, processes
from .resolve import AT_FDCWD, Caller, where
from .rules import REFUSED, Making, Rules

O_TMPFILE_BIT = 0o20000000
AT_SYMLINK_NOFOLLOW, AT_REMOVEDIR, AT_SYMLINK_FOLLOW, AT_EMPTY_PATH = 0x100, 0x200, 0x400, 0x1000
RENAME_EXCHANGE = 2
_MAX_LINKS = 40  # the kernel's own limit on symlinks followed in one walk
_libc = ctypes.CDLL(None, use_errno=True)


class Answer(Exception):
    """The call's result: ``value``, or a descriptor to hand over; or, for ``proceed``, the
    kernel makes the call itself (only a read-only ``open`` whose flags are registers, whose
    path no check was made on: the command's own Landlock domain judges it)."""

    def __init__(
        self,
        value: int = 0,
        fd: int | None = None,
        *,
        cloexec: bool = False,
        proceed: bool = False,
    ) -> None:
        super().__init__(value)
        self.value, self.fd, self.cloexec, self.proceed = value, fd, cloexec, proceed


WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | O_TMPFILE_BIT
SETID = stat.S_ISUID | stat.S_ISGID
"""Mode bits no file the supervisor makes or changes gets: the command's writes are direct,
so a setuid-root program it made (``cp /bin/sh s; chmod 4755 s`` as root) would stay in the
person's folder. A folder keeps its setgid bit (it only names the group of what is made in
it); the kernel drops the bits at the first write of a file (:func:`made_mode`)."""


def made_mode(mode: int, umask: int) -> int:
    """The mode a file (not a folder) the command makes gets: ``mode`` less the umask, and
    never setuid or setgid (:data:`SETID`)."""
    return mode & 0o7777 & ~umask & ~SETID


def refuse_privileged(info: os.stat_result, path: str) -> None:
    """``EPERM`` for a privileged program (a file setuid, setgid or with file capabilities):
    the command may not rewrite it (a write through a shared memory map keeps the bits and
    the capabilities, where ``write`` drops them), give it a new name or move it, nor change
    its access ACL (which can make a setgid file executable without a ``chmod``). ``path``
    is the supervisor's own ``/proc/self/fd/N`` of the object, ``info`` its ``stat``."""
    if stat.S_ISREG(info.st_mode) and (info.st_mode & SETID or capable(path)):
        raise PermissionError(errno.EPERM, "a setuid, setgid or capable program", path)


def chmod_mode(target: str, mode: int) -> int:
    """``mode`` for ``chmod`` of ``target`` (the supervisor's own ``/proc/self/fd/N``);
    ``EPERM`` for a setuid or setgid bit it does not have already on anything but a folder
    (:data:`SETID`): the person's own privileged program may keep its bits or lose them
    (``chmod go-w``, ``chmod u-s``), never gain one."""
    if mode & SETID:
        info = os.stat(target)
        if not stat.S_ISDIR(info.st_mode) and mode & SETID & ~info.st_mode:
            raise PermissionError(errno.EPERM, "a setuid or setgid bit on a file", target)
    return mode & 0o7777


def writes(flags: int) -> bool:
    """Whether an open with ``flags`` can write, create or truncate."""
    return bool(flags & WRITES)


class Waiting(Exception):
    """A FIFO opened for writing has no reader yet: the caller waits for one, on a thread
    of its own, while the supervisor answers the others. ``fd`` (``O_PATH``) is the FIFO,
    owned by the waiter; ``flags`` open it without blocking."""

    def __init__(self, fd: int, flags: int, *, cloexec: bool) -> None:
        super().__init__(fd)
        self.fd, self.flags, self.cloexec = fd, flags, cloexec

    def wait(self, still: Callable[[], bool]) -> Answer | None:
        """Try again every 10 ms while ``still()``; the answer, or ``None`` once the caller
        is gone or the supervisor stopped."""
        try:
            while still():
                try:
                    fd = os.open(f"/proc/self/fd/{self.fd}", self.flags)
                except OSError as error:
                    if error.errno != errno.ENXIO:
                        return Answer(-(error.errno or errno.EPERM))
                    time.sleep(0.01)
                    continue
                os.set_blocking(fd, True)
                return Answer(fd=fd, cloexec=self.cloexec)
            return None
        finally:
            os.close(self.fd)


def refuse_if(rules: Rules, path: str) -> None:
    """Raise ``EROFS`` when ``rules`` keep ``path``."""
    if rules.refuses(path):
        raise OSError(REFUSED, "protected", path)


def refuse_new(rules: Rules, path: str, how: Making, at: tuple[int, bytes] | None = None) -> None:
    """Raise ``EROFS`` when ``rules`` refuse to make the name ``path`` by ``how`` (``at``:
    the folder, opened, and the name, where a repository may be in the making)."""
    if rules.refuses_new(path, how, at):
        raise OSError(REFUSED, "a new protected name", path)


def _brought_in(rules: Rules, source: tuple[int, bytes, str], target: str) -> None:
    """Raise ``EXDEV`` for a folder moved from outside the surveyed roots into them: what
    it holds was never judged (``mv`` then copies, one judged name at a time)."""
    folder, last, path = source
    if not rules.roots or protected.inside(path, rules.roots):
        return
    if not protected.inside(target, rules.roots):
        return
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(last, dir_fd=folder).st_mode):
            raise OSError(errno.EXDEV, "a folder from outside the roots", path)


def open_path(  # noqa: PLR0912, PLR0915 - one branch per case of open(2)
    caller: Caller,
    rules: Rules,
    at: tuple[int, bytes],
    flags: int,
    mode: int,
    *,
    resolve: int = 0,
) -> Answer:
    """``openat`` (and ``open``, ``creat``, ``openat2``) for writing or creating, of
    ``at`` (the caller's descriptor and path)."""
    dirfd, path = at
    cloexec = bool(flags & os.O_CLOEXEC)
    anchored = bool(resolve & (kernel.RESOLVE_BENEATH | kernel.RESOLVE_IN_ROOT))
    reading = not writes(flags)
    if reading and not anchored and processes.is_proc(path):
        base, path = processes.start(caller, path)  # another's process: EACCES
        if not path:  # /proc/self/fd/N, /proc/self/exe: the object the link names
            return Answer(fd=_reopen(rules, base, flags), cloexec=cloexec)
    else:
        own = caller.own_fd(path) if path.startswith(b"/") and not anchored else None
        if own is not None:  # (an O_TMPFILE in /proc/self/fd/N, a folder: made as asked)
            return Answer(fd=_reopen(rules, own, flags, caller, mode), cloexec=cloexec)
        base, path = caller.start(dirfd, path, anchored=anchored)
    exclusive = flags & os.O_CREAT and flags & os.O_EXCL
    follow = not (flags & os.O_NOFOLLOW or exclusive or resolve & kernel.RESOLVE_NO_SYMLINKS)
    for _ in range(_MAX_LINKS):
        found = None
        if not exclusive:  # O_CREAT | O_EXCL makes a new name or fails: no object to find
            with contextlib.suppress(FileNotFoundError):
                nofollow = 0 if follow else os.O_NOFOLLOW
                found = caller.walk(base, path, nofollow, resolve, proc=reading)
        if found is not None:
            if stat.S_ISLNK(os.fstat(found).st_mode):
                raise OSError(errno.ELOOP, "a symlink, not followed")
            if flags & os.O_DIRECTORY and not stat.S_ISDIR(os.fstat(found).st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "not a folder")
            return Answer(fd=_reopen(rules, found, flags, caller, mode), cloexec=cloexec)
        if not flags & os.O_CREAT:
            raise FileNotFoundError(errno.ENOENT, "no such file")
        if resolve & kernel.RESOLVE_CACHED:
            raise BlockingIOError(errno.EAGAIN, "not cached")
        folder, last, target = caller.parent(base, path, resolve)
        info = None
        refused = rules.refuses_new(target, "file", (folder, last))
        if not exclusive or refused:  # (O_EXCL and allowed: its own create says EEXIST)
            with contextlib.suppress(FileNotFoundError):
                info = os.lstat(last, dir_fd=folder)
        if info is not None and stat.S_ISLNK(info.st_mode) and follow:
            if anchored:  # a dangling link under BENEATH or IN_ROOT: not followed here
                raise OSError(errno.EXDEV, "a dangling symlink beneath the root")
            path, base = os.readlink(last, dir_fd=folder), folder  # creates what it names
            continue
        if info is not None:
            if exclusive:
                raise FileExistsError(errno.EEXIST, "exists")
            continue  # it appeared since the walk: look again
        if refused:
            raise OSError(REFUSED, "a new protected name", target)
        made = flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            wanted = made_mode(mode, caller.umask())
            fd = os.open(last, made, wanted, dir_fd=folder)
        except FileExistsError:
            if exclusive:
                raise
            continue
        try:
            caller.settle(fd, wanted)
        except BaseException:
            os.close(fd)
            raise
        return Answer(fd=fd, cloexec=cloexec)
    raise OSError(errno.ELOOP, "too many symlinks")


def _reopen(
    rules: Rules, found: int, flags: int, caller: Caller | None = None, mode: int = 0o600
) -> int:
    """Open the object of the ``O_PATH`` descriptor ``found`` with ``flags``, once checked:
    its own path is judged, never a name that could since lead elsewhere. An ``O_TMPFILE``
    made in the folder ``found`` gets ``mode`` as a create would (:func:`made_mode`)."""
    info = os.fstat(found)
    device = where(found) if stat.S_ISCHR(info.st_mode) else None
    processes.check(found)  # another process's /proc entry: EACCES
    if (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)) and writes(flags):
        refuse_if(rules, where(found))
        refuse_privileged(info, f"/proc/self/fd/{found}")
    elif device is not None:
        rules.terminals.check(device)  # another's /dev/pts/N: EACCES
    if stat.S_ISDIR(info.st_mode) and flags & os.O_CREAT:
        raise IsADirectoryError(errno.EISDIR, "a folder")
    if flags & O_TMPFILE_BIT:
        wanted = made_mode(mode, 0o077 if caller is None else caller.umask())
        made = os.open(".", flags | os.O_CLOEXEC, wanted, dir_fd=found)
        if caller is not None:
            caller.settle(made, wanted)
        return made
    reopen = flags & ~(os.O_CREAT | os.O_EXCL | os.O_TRUNC | os.O_NOFOLLOW) | os.O_CLOEXEC
    fifo = stat.S_ISFIFO(info.st_mode) and not flags & os.O_NONBLOCK
    if fifo:
        reopen |= os.O_NONBLOCK  # never wait here for a reader: the whole run would wait
    try:
        fd = os.open(f"/proc/self/fd/{found}", reopen)
    except OSError as error:
        if fifo and error.errno == errno.ENXIO:  # no reader yet: the caller waits, not us
            raise Waiting(os.dup(found), reopen, cloexec=bool(flags & os.O_CLOEXEC)) from None
        raise
    try:
        if device is not None:
            rules.terminals.made(fd, device)  # a new terminal from /dev/ptmx: the run's own
        if fifo:
            os.set_blocking(fd, True)
        if flags & os.O_TRUNC and stat.S_ISREG(info.st_mode):
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def make(
    caller: Caller,
    rules: Rules,
    at: tuple[int, bytes],
    do: Callable[[int, bytes], None],
    how: Making | None = None,
) -> Answer:
    """A call that makes (``how``) or removes the last name of ``at`` (``mkdir``,
    ``mknod``, ``symlink``, ``unlink``, ``rmdir``): ``do(folder, name)`` once allowed."""
    folder, last, target = caller.parent(*caller.start(*at))
    if how is None:
        refuse_if(rules, target)
    else:
        refuse_new(rules, target, how, (folder, last))
    do(folder, last)
    if how == "mkdir" and os.path.basename(target) == GIT:
        rules.fresh.add(target)  # made empty by the command: a fresh repository
    return Answer()


def link(
    caller: Caller, rules: Rules, old: tuple[int, bytes], new: tuple[int, bytes], flags: int
) -> Answer:
    """``linkat``: neither a protected file may gain a name nor a protected name a file."""
    (olddir, oldpath), (newdir, newpath) = old, new
    if flags & ~(AT_SYMLINK_FOLLOW | AT_EMPTY_PATH):
        raise OSError(errno.EINVAL, "bad flags")
    own = caller.own_fd(oldpath) if flags & AT_SYMLINK_FOLLOW else None
    if own is None and flags & AT_EMPTY_PATH and not oldpath:
        own = caller.start(olddir, b"")[0]
    source: tuple[int, bytes] | None = None
    if own is not None:
        refuse_if(rules, where(own).removesuffix(" (deleted)"))
    elif flags & AT_SYMLINK_FOLLOW:
        own = caller.walk(*caller.start(olddir, oldpath), 0)
        refuse_if(rules, where(own))
    else:
        folder, last, target = caller.parent(*caller.start(olddir, oldpath))
        refuse_if(rules, target)
        source = (folder, last)
    if source is not None:
        _refuse_privileged_at(*source)
    elif own is not None:
        refuse_privileged(os.fstat(own), f"/proc/self/fd/{own}")
    folder, last, target = caller.parent(*caller.start(newdir, newpath))
    refuse_new(rules, target, "link", (folder, last))
    if source is None:
        os.link(f"/proc/self/fd/{own}", last, dst_dir_fd=folder, follow_symlinks=True)
    else:
        os.link(source[1], last, src_dir_fd=source[0], dst_dir_fd=folder, follow_symlinks=False)
    return Answer()


def rename(
    caller: Caller, rules: Rules, old: tuple[int, bytes], new: tuple[int, bytes], flags: int
) -> Answer:
    """``renameat2``: nothing protected moves, and nothing moves onto a protected name."""
    ofolder, olast, otarget = caller.parent(*caller.start(*old))
    nfolder, nlast, ntarget = caller.parent(*caller.start(*new))
    for target in (otarget, ntarget):
        if rules.holds(target):
            raise OSError(REFUSED, "protected", target)
    refuse_new(rules, ntarget, "rename", (nfolder, nlast))
    exchange = flags & RENAME_EXCHANGE
    if exchange:
        refuse_new(rules, otarget, "rename", (ofolder, olast))
    _brought_in(rules, (ofolder, olast, otarget), ntarget)
    _refuse_privileged_at(ofolder, olast)
    if exchange:
        _brought_in(rules, (nfolder, nlast, ntarget), otarget)
        _refuse_privileged_at(nfolder, nlast)
    if _libc.renameat2(ofolder, olast, nfolder, nlast, ctypes.c_uint(flags)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return Answer()


def _refuse_privileged_at(folder: int, last: bytes) -> None:
    """:func:`refuse_privileged` for the name ``last`` of ``folder`` (not followed)."""
    try:
        fd = os.open(last, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    except FileNotFoundError:
        return  # the call itself says so
    try:
        refuse_privileged(os.fstat(fd), f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def truncate(caller: Caller, rules: Rules, path: bytes, length: int) -> Answer:
    """``truncate``: the file it leads to (symlinks followed), judged by its own path."""
    own = caller.own_fd(path) if path.startswith(b"/") else None
    found = own if own is not None else caller.walk(*caller.start(AT_FDCWD, path), 0)
    try:
        fd = _reopen(rules, found, os.O_WRONLY)
    except Waiting as fifo:
        os.close(fifo.fd)
        raise OSError(errno.EINVAL, "not a file") from None
    try:
        os.ftruncate(fd, ctypes.c_int64(length).value)
    finally:
        os.close(fd)
    return Answer()


def unlink(folder: int, last: bytes, flags: int) -> None:
    """``unlinkat(folder, last, flags)``."""
    if flags & ~AT_REMOVEDIR:
        raise OSError(errno.EINVAL, "bad flags")
    if flags & AT_REMOVEDIR:
        os.rmdir(last, dir_fd=folder)
    else:
        os.unlink(last, dir_fd=folder)


def attributes(
    caller: Caller,
    rules: Rules,
    at: tuple[int, bytes],
    flags: int,
    change: Callable[[str], None],
) -> Answer:
    """``chmod`` and ``chown`` in all their forms: ``change(path)`` on the object ``at``
    leads to (symlinks followed unless ``AT_SYMLINK_NOFOLLOW``; the descriptor itself for
    an empty path with ``AT_EMPTY_PATH``), once its own path is allowed."""
    dirfd, path = at
    if flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH):
        raise OSError(errno.EINVAL, "bad flags")
    if not path and flags & AT_EMPTY_PATH:
        found = caller.start(dirfd, b"")[0]
    else:
        own = caller.own_fd(path) if path.startswith(b"/") else None
        nofollow = os.O_NOFOLLOW if flags & AT_SYMLINK_NOFOLLOW else 0
        found = own if own is not None else caller.walk(*caller.start(dirfd, path), nofollow)
    refuse_if(rules, where(found).removesuffix(" (deleted)"))
    change(f"/proc/self/fd/{found}")
    return Answer()
