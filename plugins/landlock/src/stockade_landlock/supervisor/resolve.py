"""Where a notified call's path leads, found as the kernel would find it for the caller.

The path is read from the caller's memory once (:func:`read_path`); what the supervisor
then does uses that copy, so a thread that changes the memory afterwards changes nothing.
The walk starts where the caller's would: ``/``, its working directory
(``/proc/TID/cwd``) or its descriptor (``/proc/TID/fd/N``), each opened ``O_PATH`` (the
object itself, wherever it has moved since), through the thread's own ``/proc/TID`` folder
once its view keeps one (:meth:`Caller._task`). The kernel then walks the rest with
``openat2`` and ``RESOLVE_NO_MAGICLINKS``: symlinks at every component are followed as for
the caller, but no ``/proc`` magic link, since ``/proc/self`` would be the supervisor's.
The caller's own descriptors named through ``/proc/self/fd/N``, ``/dev/fd/N`` and
``/dev/stdout`` are taken from ``/proc/TID/fd/N`` instead (:meth:`Caller.own_fd`); any
other path through ``/proc`` is refused (``EACCES``).
"""

from __future__ import annotations

import errno
import os
import re

from . import kernel
from .views import View, Views

PATH_MAX = 4096
AT_FDCWD = -100
PROC_SUPER_MAGIC = 0x9FA0
_PAGE = os.sysconf("SC_PAGE_SIZE")
_OWN_FD = re.compile(rb"^/proc/(self|thread-self|\d+)/fd/(\d+)$|^/dev/fd/(\d+)$")
# A path through one of the caller's own magic links, with something after it.
_THROUGH = re.compile(
    rb"^/proc/(self|thread-self|\d+)/(root|cwd|fd/(\d+))(/.*)$|^/dev/fd/(\d+)(/.*)$"
)
_STD = {b"/dev/stdin": 0, b"/dev/stdout": 1, b"/dev/stderr": 2}


def on_proc(fd: int) -> bool:
    """Whether ``fd`` lies on a ``/proc`` (procfs) mount."""
    kind = kernel.fs_type(fd)
    return kind is None or kind == PROC_SUPER_MAGIC  # cannot tell: treat as /proc, refused


def where(fd: int) -> str:
    """The path of the supervisor's own descriptor ``fd``, as the kernel keeps it."""
    return os.readlink(f"/proc/self/fd/{fd}")


def signed(value: int) -> int:
    """A register's low 32 bits as the kernel reads an ``int`` (a dirfd, ``AT_FDCWD``)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def split(path: bytes) -> tuple[bytes, bytes]:
    """``path`` (not empty) as the folder to walk to and the last name in it, with any
    trailing slash kept on the name for the kernel to judge (``a/b/`` is ``a/``, ``b/``;
    ``/`` is ``/``, ``.``; ``b`` is ``.``, ``b``)."""
    stripped = path.rstrip(b"/")
    if not stripped:
        return b"/", b"."
    cut = stripped.rfind(b"/")
    return (path[: cut + 1] if cut >= 0 else b"."), path[cut + 1 :]


class Caller:
    """The thread whose call waits: its memory, working directory and descriptors."""

    def __init__(
        self, listener: int, ident: int, tid: int, *, exact: bool = True, views: Views | None = None
    ) -> None:
        self.listener, self.ident, self.tid = listener, ident, tid
        self.exact = exact  # the supervisor's umask is 0: a mode given is the mode made
        self.opened: list[int] = []  # closed by close()
        self._text: bytes | None = None
        self._views = views
        self._view: View | None = None
        self._looked = views is None

    def close(self) -> None:
        """Close every descriptor opened for this call."""
        for fd in self.opened:
            os.close(fd)
        self.opened.clear()

    def keep(self, fd: int) -> int:
        """Close ``fd`` with the call."""
        self.opened.append(fd)
        return fd

    def still(self) -> None:
        """Raise ``ESRCH`` unless the call still waits (its pid still names its caller)."""
        if not kernel.valid(self.listener, self.ident):
            raise ProcessLookupError(errno.ESRCH, "the caller is gone")

    def read_path(self, address: int) -> bytes:
        """The NUL-terminated path at ``address`` in the caller's memory, read once."""
        if address == 0:
            raise OSError(errno.EFAULT, "a null path")
        out = b""
        while len(out) < PATH_MAX:
            want = min(_PAGE - address % _PAGE, PATH_MAX - len(out))
            try:
                data = kernel.read_memory(self.tid, address, want)
            except OSError as error:
                raise OSError(error.errno or errno.EFAULT, "cannot read the path") from None
            end = data.find(b"\0")
            if end >= 0:
                return out + data[:end]
            if len(data) < want:
                raise OSError(errno.EFAULT, "the path runs into unmapped memory")
            out += data
            address += want
        raise OSError(errno.ENAMETOOLONG, "path too long")

    def read_struct(self, address: int, size: int) -> bytes:
        """``size`` bytes at ``address`` (``EFAULT`` when they are not all there)."""
        data = kernel.read_memory(self.tid, address, size) if address else b""
        if len(data) != size:
            raise OSError(errno.EFAULT, "bad address")
        return data

    def settle(self, fd: int | None, mode: int, name: bytes = b"", folder: int = -1) -> None:
        """Give what was just made ``mode`` exactly, where the supervisor could not take a
        umask of its own (the host's then narrowed it: never wider than ``mode``)."""
        if self.exact:
            return
        if fd is not None:
            os.fchmod(fd, mode)
        else:
            os.chmod(name, mode, dir_fd=folder, follow_symlinks=False)

    def _status(self, key: bytes) -> bytes | None:
        """A field of the caller's ``/proc/TID/status``, read once per call."""
        if self._text is None:
            fd = os.open(f"/proc/{self.tid}/status", os.O_RDONLY | os.O_CLOEXEC)
            try:
                self._text = os.read(fd, 1 << 14)
            finally:
                os.close(fd)
        found = re.search(rb"^" + key + rb":\s*(\S+)", self._text, re.MULTILINE)
        return None if found is None else found.group(1)

    def _look(self) -> View | None:
        """This thread's view, looked up once per call."""
        if not self._looked and self._views is not None:
            self._looked = True
            self._view = self._views.get(self.tid)
        return self._view

    def umask(self) -> int:
        """The caller's umask, from ``/proc/TID/status`` (or its view, :mod:`.views`)."""
        view = self._look()
        if view is not None and view.umask is not None:
            return view.umask
        value = self._status(b"Umask")
        umask = 0o022 if value is None else int(value, 8)
        view = self._kept()
        if view is not None:
            view.umask = umask
        return umask

    def _kept(self) -> View | None:
        """This thread's view, made now if there is none (``None``: none may be kept)."""
        if self._look() is None and self._views is not None:
            self._view = self._views.make(self.tid, self.still)
        return self._view

    def tgid(self) -> int:
        """The caller's process (its thread group), from ``/proc/TID/status``."""
        value = self._status(b"Tgid")
        if value is None:
            raise ProcessLookupError(errno.ESRCH, "the caller has no thread group")
        return int(value)

    def start(self, dirfd: int, path: bytes, *, anchored: bool = False) -> tuple[int, bytes]:
        """Where the walk of ``path`` starts, and what is left to walk: ``AT_FDCWD``
        (meaning ``/``) for an absolute path, else the caller's working directory or its
        descriptor ``dirfd`` (opened ``O_PATH`` here, closed with the call). A path through
        the caller's own ``/proc/self/{root,cwd,fd/N}`` starts at what that link names for
        the caller. ``anchored``: ``openat2``'s ``RESOLVE_BENEATH`` or ``RESOLVE_IN_ROOT``,
        where even an absolute path starts at ``dirfd``."""
        if path.startswith(b"/") and not anchored:
            through = _THROUGH.match(path)
            if through is None:
                return AT_FDCWD, path
            who, link, number, rest, dev_fd, dev_rest = through.groups()
            if dev_fd is not None:
                return self._opened(f"fd/{int(dev_fd)}"), b"." + dev_rest
            if who not in (b"self", b"thread-self") and not self._own(who):
                return AT_FDCWD, path  # another process's: walked here, refused on /proc
            if link == b"root":  # chroot is refused: the caller's root is the supervisor's
                return AT_FDCWD, rest
            where_ = "cwd" if link == b"cwd" else f"fd/{int(number)}"
            return self._opened(where_), b"." + rest
        number = signed(dirfd)
        if number != AT_FDCWD and number < 0:
            raise OSError(errno.EBADF, "bad descriptor")
        return self._opened("cwd" if number == AT_FDCWD else f"fd/{number}"), path

    def take(self, number: int) -> int:
        """A copy of the caller's descriptor ``number`` (the same open file: a socket, a
        file opened for reading), closed with the call."""
        number = signed(number)
        if number < 0:
            raise OSError(errno.EBADF, "bad descriptor")
        return self.keep(kernel.take_fd(self.tid, number, self.tgid, self.still))

    def _opened(self, link: str) -> int:
        """``/proc/TID/LINK`` (``cwd`` or ``fd/N``) opened ``O_PATH``: the object itself."""
        try:
            return self._link(link)
        except FileNotFoundError:
            raise OSError(errno.EBADF, "bad descriptor") from None

    def _link(self, link: str) -> int:
        """``/proc/TID/LINK`` opened ``O_PATH`` (closed with the call), through the
        thread's kept ``/proc/TID`` folder where it has one (:meth:`_task`)."""
        views = self._views
        view = None if views is None else views.find(self.tid)
        if view is not None and view.task is not None:
            try:
                fd = os.open(link, os.O_PATH | os.O_CLOEXEC, dir_fd=view.task)
            except OSError:
                pass  # the view's thread is gone, or no such link: the plain way tells
            else:  # the view's thread lives: it is the caller (see _task)
                self._looked, self._view = True, view
                return self.keep(fd)
        fd = self.keep(os.open(f"/proc/{self.tid}/{link}", os.O_PATH | os.O_CLOEXEC))
        self.still()
        self._task()
        return fd

    def _task(self) -> None:
        """Keep the caller's ``/proc/TID`` folder (``O_PATH``) in its view, if it has one
        (so from its second call that needed a link on). That descriptor names the thread
        that held the number when it was opened (the kernel's ``struct pid``), not the
        number: once the thread is gone nothing opens through it, and while it lives no
        other thread holds its number. A link opened through it is therefore the
        caller's own, with no ``NOTIF_ID_VALID`` after it, and the view's umask the
        caller's with no look at its pidfd: two calls fewer on each create."""
        view = self._look()  # alive, or dropped
        if view is None or view.task is not None:
            return
        task = os.open(f"/proc/{self.tid}", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.still()  # the number was still the caller's when the folder was opened
        except BaseException:
            os.close(task)
            raise
        view.task = task

    def own_fd(self, path: bytes) -> int | None:
        """An ``O_PATH`` descriptor of the caller's own descriptor that ``path`` names
        (``/proc/self/fd/N``, ``/dev/fd/N``, ``/dev/stdout``...), or ``None``."""
        number = _STD.get(path)
        if number is None:
            found = _OWN_FD.match(path)
            if found is None:
                return None
            who, fd_text, dev_fd = found.groups()
            if who is not None and who not in (b"self", b"thread-self") and not self._own(who):
                return None
            number = int(fd_text if dev_fd is None else dev_fd)
        try:
            return self._link(f"fd/{number}")
        except FileNotFoundError:
            raise OSError(errno.ENOENT, "no such descriptor") from None

    def _own(self, pid: bytes) -> bool:
        return int(pid) in (self.tid, self.tgid())

    def walk(
        self, base: int, path: bytes, flags: int, resolve: int = 0, *, proc: bool = False
    ) -> int:
        """``openat2(base, path, O_PATH | flags)`` without magic links; refused on /proc
        unless ``proc`` (a read: the caller then judges whose the object is)."""
        fd = self.keep(
            kernel.openat2(
                base,
                path,
                os.O_PATH | os.O_CLOEXEC | flags,
                0,
                resolve | kernel.RESOLVE_NO_MAGICLINKS,
            )
        )
        if not proc and on_proc(fd):
            raise PermissionError(errno.EACCES, "no path through /proc")
        return fd

    def parent(self, base: int, path: bytes, resolve: int = 0) -> tuple[int, bytes, str]:
        """The folder that holds ``path``'s last name (opened), that name as given (with
        any trailing slash, for the kernel to judge), and the path it names."""
        if not path:
            raise FileNotFoundError(errno.ENOENT, "an empty path")
        head, last = split(path)
        folder = self.walk(base, head, os.O_DIRECTORY, resolve)
        name = os.fsdecode(last.rstrip(b"/") or b".")
        above = where(folder)  # absolute and normal, as the kernel keeps it
        if name in (".", ".."):
            return folder, last, os.path.normpath(os.path.join(above, name))
        return folder, last, f"{above}/{name}" if above != "/" else f"/{name}"
