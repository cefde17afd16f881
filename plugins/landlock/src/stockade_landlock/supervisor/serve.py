"""The supervisor: a thread in the command's Landlock domain that answers its notified calls.

It is started by the thread that spawns the command, after Landlock is applied and before
the seccomp filters are, so it carries the command's Landlock domain and no capability, but
no filter: its own calls are judged by Landlock exactly as the command's would be, and never
come back to it. It answers each call it checks by performing it (:mod:`.calls`), never
with ``SECCOMP_USER_NOTIF_FLAG_CONTINUE``: letting the kernel make a checked call would make
it read the path from the command's memory again, after a thread of the command changed it.
Only a read-only ``open`` it does not check (its path names neither ``/proc`` nor
``/dev/pts``) goes back to the kernel that way: the command's own Landlock domain refuses
whatever such a path could be swapped for.

When it stops (the run is over, or it fails), it closes the listener: the kernel then fails
every notified call of the command with ``ENOSYS``, so a command whose supervisor died can
no longer open, create, write, rename, link or remove anything (it fails closed).
"""

from __future__ import annotations

import _thread
import ctypes
import errno
import functools
import os
import select
import threading
from collections.abc import Callable, Sequence
from typing import ClassVar

from . import calls, kernel, metadata, processes, sockets
from . import flags as file_flags
from .bpf import IOCTL, NOTIFIED, OPENS, WRITE_FLAGS, program
from .calls import Answer
from .resolve import Caller, signed
from .rules import Rules
from .views import CHANGES, Views

_BY_NUMBER = (
    {nr: name for name, nr in NOTIFIED.items()}
    | {nr: name for name, (nr, _arg) in OPENS.items()}
    | {IOCTL: "ioctl"}
)
_OPEN_HOW = ctypes.sizeof(kernel.OpenHow)


class Supervisor:
    """One run's supervisor: :meth:`start` it on the restricted spawning thread, hand it
    the listener with :meth:`attach`, :meth:`stop` it when the run is over."""

    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        self.served = 0  # calls answered (for the tests and the bench)
        self._listener: int | None = None
        self._ready = threading.Event()
        self._wake = os.eventfd(0, os.EFD_CLOEXEC)
        self._done = _thread.allocate_lock()  # held while the serving thread runs
        self._ident: int | None = None
        self._stopped = False
        self._exact: bool | None = None  # known at the first call judged in full
        self._closed = False
        self._sending = threading.Lock()
        self._views = Views()

    def start(self) -> None:
        """Start the serving thread (it takes the caller's Landlock domain, no filter):
        a bare thread, not a :class:`threading.Thread`, whose start waits for the new
        thread to run (a switch per run for nothing: :meth:`stop` joins it by a lock)."""
        self._done.acquire()
        try:
            self._ident = _thread.start_new_thread(self._run, ())
        except BaseException:
            self._done.release()
            raise

    def _run(self) -> None:
        try:
            self._serve()
        finally:
            self._done.release()

    def arm(
        self, load_policy: Callable[[], None], narrow: Callable[[], None] | None = None
    ) -> None:
        """On the spawning thread, Landlock applied: start serving (the thread takes this
        Landlock domain and no filter), ``narrow`` the spawning thread by one more Landlock
        layer (the command's, never the supervisor's), load the shared policy, then the
        notifying filter, and hand its listener over. Raises ``OSError`` when a layer or a
        filter cannot be loaded."""
        self.start()
        if narrow is not None:
            narrow()
        load_policy()
        self.attach(kernel.install_listener(_program()))

    def attach(self, listener: int) -> None:
        """Hand over the listener of the filter just installed."""
        self._listener = listener
        self._ready.set()

    def stop(self) -> None:
        """Stop serving and close the listener (the command's next notified call fails)."""
        if self._stopped:
            return
        self._stopped = True
        self._ready.set()
        os.eventfd_write(self._wake, 1)
        if self._ident is not None and self._ident != _thread.get_ident():
            with self._done:  # the serving thread is over
                pass
        os.close(self._wake)

    def _serve(self) -> None:
        self._ready.wait()
        listener = self._listener
        if listener is None:
            return
        try:  # any failure closes the listener: the command's next call fails (ENOSYS)
            kernel.sync_wake_up(listener)  # an older kernel: the ordinary wake-ups
            poller = select.poll()
            poller.register(listener, select.POLLIN)
            poller.register(self._wake, select.POLLIN)
            buffers = _Buffers.take()
            try:
                self._loop(listener, poller, buffers)
            finally:
                _Buffers.spare.append(buffers)
        finally:
            with self._sending:
                self._closed = True
                os.close(listener)
            self._views.clear()

    def _loop(self, listener: int, poller: select.poll, buffers: _Buffers) -> None:
        inbox, peek, views, wake = buffers.inbox, buffers.peek, self._views, self._wake
        notif, data = inbox.notif, inbox.data
        while not self._stopped:
            for fd, event in poller.poll():
                if fd == wake:
                    return
                if event & _GONE:
                    return  # no process is left under the filter
            try:
                inbox.recv(listener)
            except OSError as error:
                if error.errno in (errno.ENOENT, errno.EINTR):
                    continue  # the caller was killed before we read it
                raise
            views.seen(notif.pid)
            if data.nr in _CHANGES:  # umask: the views forgotten
                views.changing(notif.pid)
                self._send(listener, notif.id, _PROCEED)
            elif not self._read_only(listener, inbox, peek):
                self._answer(listener, inbox)

    def _read_only(self, listener: int, inbox: kernel.Inbox, peek: kernel.Peek) -> bool:
        """The hot path: answer at once, with no object made, a read-only ``open`` or
        ``openat`` whose path names neither ``/proc`` nor ``/dev/pts`` (the kernel makes
        it: its flags are a register, and what its path could be swapped for is the
        command's own Landlock domain's to refuse). ``False``: the full path answers."""
        arg = _READ_OPENS.get(inbox.data.nr)
        args = inbox.args
        if arg is None or args[arg + 1] & WRITE_FLAGS:
            return False
        # Unreadable (b""): proceed all the same, the kernel and the command's own domain
        # judge it (a non-dumpable command's memory cannot be read, its reads still work).
        notif = inbox.notif
        head = peek.read(notif.pid, args[arg])
        if head is None or _made_here(head):
            return False  # cut short by a page's end, or made here: judged in full
        self.served += 1
        with self._sending:
            if not self._closed:
                try:  # noqa: SIM105 - the hot path: no context manager made per call
                    kernel.send(listener, notif.id, proceed=True)
                except (ProcessLookupError, FileNotFoundError):
                    pass  # the caller is gone: nothing to answer
        return True

    def _own_umask(self) -> bool:
        """Give the serving thread a umask of its own, 0 (never the host's: the command's
        is applied to each create), at the first call judged in full (``true`` makes
        none); ``False`` where ``unshare`` is refused (a container's filter): each mode
        made is then settled by hand."""
        try:
            kernel.own_fs()
        except OSError:
            return False
        os.umask(0)
        return True

    def _answer(self, listener: int, inbox: kernel.Inbox) -> None:
        exact = self._exact
        if exact is None:
            exact = self._exact = self._own_umask()
        notif = inbox.notif
        caller = Caller(listener, notif.id, notif.pid, exact=exact, views=self._views)
        try:
            try:
                answer = self._decide(caller, inbox.data)
            except calls.Waiting as waiting:
                self._wait(listener, notif.id, waiting)
                return
            except OSError as error:
                answer = Answer(-(error.errno or errno.EPERM))
            except Exception:  # noqa: BLE001 - any fault refuses the call, never allows it
                answer = Answer(-errno.EPERM)
            self._send(listener, notif.id, answer)
        finally:
            caller.close()

    def _wait(self, listener: int, ident: int, waiting: calls.Waiting) -> None:
        """Answer a call that waits for a FIFO's reader from a thread of its own (it keeps
        this Landlock domain), so the others are answered meanwhile."""

        def still() -> bool:
            return not self._stopped and kernel.valid(listener, ident)

        def run() -> None:
            answer = waiting.wait(still)
            if answer is not None:
                self._send(listener, ident, answer)

        threading.Thread(target=run, name="stockade-supervisor-fifo", daemon=True).start()

    def _send(self, listener: int, ident: int, answer: Answer) -> None:
        """Send ``answer`` to call ``ident`` (its descriptor is closed here)."""
        self.served += 1
        try:
            with self._sending:  # never on a listener closed (its number reused) meanwhile
                if self._closed:
                    return
                try:
                    if answer.proceed:
                        kernel.send(listener, ident, proceed=True)
                    elif answer.fd is not None:
                        kernel.send_fd(listener, ident, answer.fd, cloexec=answer.cloexec)
                    elif answer.value < 0:
                        kernel.send(listener, ident, 0, -answer.value)
                    else:
                        kernel.send(listener, ident, answer.value)
                except OSError as error:
                    if error.errno != errno.ENOENT:  # ENOENT: the caller is gone
                        raise
        finally:
            if answer.fd is not None:
                os.close(answer.fd)

    def _decide(self, caller: Caller, data: kernel.SeccompData) -> Answer:  # noqa: PLR0911, PLR0912 - a branch per call
        name = _BY_NUMBER.get(data.nr)
        a = data.args
        rules = self.rules
        path = caller.read_path
        at = -100
        if name in ("open", "openat"):
            where = (at, path(a[0])) if name == "open" else (a[0], path(a[1]))
            flags, mode = (a[1], a[2]) if name == "open" else (a[2], a[3])
            flags &= 0xFFFFFFFF
            if not calls.writes(flags) and not _made_here(where[1]):
                return _PROCEED  # a read: the command's own domain judges it (not /proc)
            return calls.open_path(caller, rules, where, flags, mode)
        if name == "creat":
            flags = os.O_CREAT | os.O_WRONLY | os.O_TRUNC
            return calls.open_path(caller, rules, (at, path(a[0])), flags, a[1])
        if name == "openat2":
            return self._openat2(caller, data)
        if name in ("mkdir", "mkdirat"):
            dirfd, p, mode = (at, a[0], a[1]) if name == "mkdir" else (a[0], a[1], a[2])
            made = mode & 0o7777 & ~caller.umask()

            def mkdir(d: int, n: bytes) -> None:
                os.mkdir(n, made, dir_fd=d)
                caller.settle(None, made, n, d)

            return calls.make(caller, rules, (dirfd, path(p)), mkdir, "mkdir")
        if name in ("mknod", "mknodat"):
            dirfd, p, mode, dev = (at, *a[:3]) if name == "mknod" else tuple(a[:4])
            node = calls.made_mode(mode, caller.umask())

            def mknod(d: int, n: bytes) -> None:
                os.mknod(n, mode & 0o170000 | node, dev, dir_fd=d)
                caller.settle(None, node, n, d)

            return calls.make(caller, rules, (dirfd, path(p)), mknod, "node")
        if name in ("symlink", "symlinkat"):
            target = path(a[0])
            dirfd, p = (at, a[1]) if name == "symlink" else (a[1], a[2])
            return calls.make(
                caller,
                rules,
                (dirfd, path(p)),
                lambda d, n: os.symlink(target, n, dir_fd=d),
                "symlink",
            )
        if name in ("unlink", "rmdir", "unlinkat"):
            unlinkat = name == "unlinkat"
            dirfd, p, flags = (a[0], a[1], a[2] & 0xFFFFFFFF) if unlinkat else (at, a[0], 0)
            flags = calls.AT_REMOVEDIR if name == "rmdir" else flags
            return calls.make(
                caller, rules, (dirfd, path(p)), lambda d, n: calls.unlink(d, n, flags)
            )
        if name in ("link", "linkat"):
            if name == "link":
                return calls.link(caller, rules, (at, path(a[0])), (at, path(a[1])), 0)
            old, new = (a[0], path(a[1])), (a[2], path(a[3]))
            return calls.link(caller, rules, old, new, a[4] & 0xFFFFFFFF)
        if name in ("rename", "renameat", "renameat2"):
            if name == "rename":
                return calls.rename(caller, rules, (at, path(a[0])), (at, path(a[1])), 0)
            flags = a[4] & 0xFFFFFFFF if name == "renameat2" else 0
            return calls.rename(caller, rules, (a[0], path(a[1])), (a[2], path(a[3])), flags)
        if name == "truncate":
            return calls.truncate(caller, rules, path(a[0]), a[1])
        if name in metadata.CALLS:
            return metadata.answer(caller, rules, name, a)
        if name == "bind":
            return sockets.bind(caller, rules, a)
        if name == "ioctl":
            return file_flags.ioctl(caller, rules, a)
        if name == "file_setattr":
            return file_flags.file_setattr(caller, rules, a)
        return self._attributes(caller, name, a)

    def _attributes(self, caller: Caller, name: str | None, a: Sequence[int]) -> Answer:
        """``chmod``, ``fchmod``, ``fchmodat(2)``, ``chown``, ``fchown``, ``lchown``,
        ``fchownat``: the object, then the change through the supervisor's own descriptor."""
        at, empty, nofollow = -100, calls.AT_EMPTY_PATH, calls.AT_SYMLINK_NOFOLLOW
        where: tuple[int, bytes]
        if name in ("chmod", "fchmod", "fchmodat", "fchmodat2"):
            if name == "chmod":
                where, mode, flags = (at, caller.read_path(a[0])), a[1], 0
            elif name == "fchmod":
                where, mode, flags = (a[0], b""), a[1], empty
            else:
                flags = a[3] & 0xFFFFFFFF if name == "fchmodat2" else 0
                where, mode = (a[0], caller.read_path(a[1])), a[2]
            return calls.attributes(
                caller, self.rules, where, flags, lambda p: os.chmod(p, calls.chmod_mode(p, mode))
            )
        if name in ("chown", "lchown", "fchown", "fchownat"):
            if name == "fchown":
                where, ids, flags = (a[0], b""), a[1:3], empty
            elif name == "fchownat":
                where, ids, flags = (a[0], caller.read_path(a[1])), a[2:4], a[4] & 0xFFFFFFFF
            else:
                where, ids = (at, caller.read_path(a[0])), a[1:3]
                flags = nofollow if name == "lchown" else 0
            uid, gid = (signed(i) for i in ids)
            return calls.attributes(
                caller, self.rules, where, flags, lambda p: os.chown(p, uid, gid)
            )
        return Answer(-errno.ENOSYS)

    def _openat2(self, caller: Caller, data: kernel.SeccompData) -> Answer:
        a = data.args
        size = a[3]
        if size < _OPEN_HOW or size > 4096:
            raise OSError(errno.EINVAL if size < _OPEN_HOW else errno.E2BIG, "bad size")
        raw = caller.read_struct(a[2], size)
        if any(raw[_OPEN_HOW:]):
            raise OSError(errno.E2BIG, "unknown open_how fields")
        how = kernel.OpenHow.from_buffer_copy(raw[:_OPEN_HOW])
        creates = os.O_CREAT | calls.O_TMPFILE_BIT
        if how.flags >> 32 or how.resolve & ~kernel.RESOLVE_ALL:
            raise OSError(errno.EINVAL, "unknown flags")
        if (how.mode and not how.flags & creates) or how.mode & ~0o7777:
            raise OSError(errno.EINVAL, "a mode without O_CREAT")
        both = kernel.RESOLVE_BENEATH | kernel.RESOLVE_IN_ROOT
        if how.resolve & both == both:
            raise OSError(errno.EINVAL, "RESOLVE_BENEATH with RESOLVE_IN_ROOT")
        path = caller.read_path(a[1])
        return calls.open_path(
            caller, self.rules, (a[0], path), how.flags, how.mode, resolve=how.resolve
        )


_PROCEED = Answer(proceed=True)
_CHANGES = frozenset(CHANGES.values())
_READ_OPENS = {nr: arg - 1 for nr, arg in OPENS.values()}  # number -> the path's argument
_HEAD = 10  # enough of a path to tell /proc/ and /dev/pts/ from the rest
_GONE = select.POLLHUP | select.POLLERR


class _Buffers:
    """A serving thread's notification buffer and peek, kept for the next run's thread
    once this one is over (ctypes structures made once per process, not per run)."""

    spare: ClassVar[list[_Buffers]] = []  # list.pop and append are atomic: no lock

    def __init__(self) -> None:
        self.inbox = kernel.Inbox()
        self.peek = kernel.Peek(_HEAD)

    @classmethod
    def take(cls) -> _Buffers:
        """A spare set, or a new one."""
        try:
            return cls.spare.pop()
        except IndexError:
            return cls()


def _made_here(path: bytes) -> bool:
    """Whether a read-only open of ``path`` (or of a path that starts with these
    :data:`_HEAD` bytes) is made by the supervisor: one under ``/proc`` (refused to the
    command's own domain) or of a terminal (the run's own only)."""
    return processes.is_proc(path) or path.startswith(b"/dev/pts/")


@functools.cache
def _program() -> bytes:
    return program()
