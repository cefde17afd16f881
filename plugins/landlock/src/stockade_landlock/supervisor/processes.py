"""Opens under ``/proc``: the command's own processes and its descendants, no other.

There is no PID namespace under Landlock, so ``/proc`` holds every process of the machine.
The command's Landlock domain has one more layer than the supervisor's (the
:class:`~.terminals.Veil`), and that layer takes file reads and writes under ``/proc``
away: an open there by the command itself (any spelling, a relative path, a descriptor of
``/proc``, a race that swaps the path after a check) is refused by the kernel. The filter
sends every ``open`` to the supervisor; one whose path reads ``/proc/...`` is made here:

- ``self`` and ``thread-self`` are the caller's (``/proc/self`` would be the supervisor's);
- a process's folder is opened first (``O_PATH``: that process, even if its number is
  reused meanwhile) and kept only when it is the command's or a descendant's: not a thread
  of the host, and within reach of the supervisor's ``ptrace`` check (reading its ``exe``
  link), which Landlock grants only for processes in a domain beneath the supervisor's:
  the command's tree, never the host's other processes nor another run's;
- one of that process's magic links (``exe``, ``cwd``, ``root``, ``fd/N``, the same under
  ``task/T``) may start the rest; the rest is walked without magic links;
- whatever object is reached, if it is on ``/proc``, belongs to such a process, or to no
  process at all (``/proc/cpuinfo``).

Listing ``/proc`` cannot be filtered (``getdents`` never reaches a filter): every
process's number is listed, and ``stat`` of ``/proc/PID`` works, but nothing in it opens.
"""

from __future__ import annotations

import errno
import os
import re

from .resolve import Caller, on_proc, where

_PID = re.compile(rb"^/proc/+(\d+|self|thread-self)(?=/|$)(.*)$", re.DOTALL)
_TOP = re.compile(rb"^/proc/+([^/]+)(.*)$", re.DOTALL)
_MAGIC = re.compile(rb"^/*((?:task/+\d+/+)?(?:exe|cwd|root|fd/+\d+))(?=/|$)(.*)$", re.DOTALL)
_OWNER = re.compile(r"^/proc/(\d+)(?:/|$)")
_MAX_LINKS = 4


def is_proc(path: bytes) -> bool:
    """Whether the supervisor opens ``path`` itself (its text names ``/proc``)."""
    return path == b"/proc" or path.startswith(b"/proc/")


def start(caller: Caller, path: bytes) -> tuple[int, bytes]:
    """Where the walk of ``path`` (``/proc...``) starts and what is left to walk (empty:
    the start is the object): the process's folder (or the object one of its magic links
    names) when it is the caller's own or a descendant's, ``/proc`` itself otherwise.
    Raises ``EACCES`` for another's."""
    for _ in range(_MAX_LINKS):
        found = _PID.match(path)
        if found is not None:
            who, rest = found.groups()
            if who == b"self":
                pid = caller.tgid()
            elif who == b"thread-self":
                pid, rest = caller.tgid(), b"/task/%d%s" % (caller.tid, rest)
            else:
                pid = int(who)
            return _process(caller, pid, rest)
        top = _TOP.match(path)
        if top is None:  # /proc itself
            return caller.keep(os.open("/proc", os.O_PATH | os.O_CLOEXEC)), b"."
        name, rest = top.groups()
        try:
            link = os.readlink(b"/proc/" + name)  # /proc/net -> self/net, /proc/mounts
        except OSError:
            return caller.keep(os.open("/proc", os.O_PATH | os.O_CLOEXEC)), name + rest
        path = os.path.join(b"/proc", link) + rest
    raise OSError(errno.ELOOP, "too many links under /proc")


def _process(caller: Caller, pid: int, rest: bytes) -> tuple[int, bytes]:
    try:
        folder = caller.keep(os.open(f"/proc/{pid}", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "no such process") from None
    if not _ours(folder):
        raise PermissionError(errno.EACCES, "not a process of this run", f"/proc/{pid}")
    magic = _MAGIC.match(rest)
    if magic is None:
        return folder, rest.lstrip(b"/") or b"."
    link, after = magic.groups()
    try:  # this one magic link is followed: it is a process of the run's own
        base = caller.keep(os.open(link, os.O_PATH | os.O_CLOEXEC, dir_fd=folder))
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "no such link") from None
    return base, after.lstrip(b"/")  # empty: the link's object itself


def _ours(folder: int) -> bool:
    """Whether the process of ``folder`` (``/proc/PID``, opened) is the command's or a
    descendant's: not the host (whose threads pass any ``ptrace`` check of the supervisor,
    a thread of it), and one whose ``exe`` the supervisor may read (``ptrace``'s read
    check, which Landlock limits to processes in domains beneath the supervisor's)."""
    try:
        with open(os.open("status", os.O_RDONLY | os.O_CLOEXEC, dir_fd=folder), "rb") as status:
            for line in status:
                if line.startswith(b"Tgid:"):
                    if int(line.split()[1]) == os.getpid():
                        return False
                    break
            else:
                return False
        os.readlink("exe", dir_fd=folder)
    except OSError:
        return False
    return True


def check(fd: int) -> None:
    """Refuse (``EACCES``) the object of ``fd`` when it is on ``/proc`` and belongs to a
    process that is not the command's nor a descendant's."""
    if not on_proc(fd):
        return
    path = where(fd)
    owner = _OWNER.match(path)
    if owner is None:
        if path == "/proc" or path.startswith("/proc/"):
            return  # /proc itself, /proc/cpuinfo, /proc/sys/...: no process's
        raise PermissionError(errno.EACCES, "a /proc elsewhere", path)
    try:
        folder = os.open(f"/proc/{owner.group(1)}", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise PermissionError(errno.EACCES, "not a process of this run", path) from None
    try:
        if not _ours(folder):
            raise PermissionError(errno.EACCES, "not a process of this run", path)
    finally:
        os.close(folder)
