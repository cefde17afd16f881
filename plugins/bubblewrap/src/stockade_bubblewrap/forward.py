"""Inside the sandbox: the one way out. Listens on ``127.0.0.1:PORT`` and hands each
connection to the host.

A ``network`` command runs in a network namespace of its own, with loopback only. This
program runs first, inside: it listens on loopback there, starts the command, and passes
every connection it accepts, as a file descriptor (``SCM_RIGHTS``), over a socket pair the
host made before the sandbox started. The host relays it to its egress proxy (see
:mod:`stockade_bubblewrap.bridge`). So tools that only speak TCP to a proxy
(``HTTPS_PROXY=http://127.0.0.1:PORT``) reach it, and the sandbox needs no ``socket()`` of
any family but ``AF_INET`` for its own loopback: not even ``AF_UNIX``, which the seccomp
filter keeps refusing. It ends with the command, with its exit status (or its signal).

It runs as ``python -I -S -c SOURCE PORT FD PROGRAM ARGV0 ARG...``, where the provider's
SOURCE is :mod:`stockade.run.spawn`, then this module, then a call of :func:`main` with
:func:`stockade.run.spawn.fork_exec`: the standard library only, nothing from the host's
environment or site-packages. So it imports nothing, and the command is started by the one
module that starts processes outside the executor.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
from collections.abc import Callable, Sequence


def _hand_over(listener: socket.socket, control: socket.socket) -> None:
    """Hand every connection waiting on ``listener`` (non-blocking) to the host."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return  # none waits (BlockingIOError), or the listener failed
        try:
            socket.send_fds(control, [b"c"], [client.fileno()])
        except OSError:
            return  # the host is gone: nothing more can be handed
        finally:
            client.close()


def _undumpable() -> None:
    """Keep the command out of this process (``PR_SET_DUMPABLE`` 0): no ``ptrace``, no
    ``pidfd_getfd``, no ``/proc/PID/fd`` or ``/mem`` of ours, should the seccomp filter ever
    let such a call through. The command's ``execve`` makes it dumpable again, for itself."""
    import ctypes

    # Should it fail, the seccomp filter still refuses those calls.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)


def main(argv: list[str], fork_exec: Callable[[str, Sequence[str]], int]) -> int:
    """Listen, start the command with ``fork_exec`` (:func:`stockade.run.spawn.fork_exec`), hand
    connections over until it ends; its status is ours.

    One thread does both, woken by a connection or by a signal (``SIGCHLD`` among them,
    through :func:`signal.set_wakeup_fd`): once the command has ended, the connections it
    made and the kernel queued are still handed over before this exits. (A second thread
    accepting them lost the last ones: a command that connected and exited at once ended
    this process before that thread had sent the connection.)"""
    port, control_fd, program, *arguments = argv
    _undumpable()
    control = socket.socket(fileno=int(control_fd))
    # The host passed it inheritable; the command must not get it (the listener, made here,
    # is already non-inheritable): both close at the command's execve.
    control.set_inheritable(False)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(port)))
    listener.listen(128)
    listener.setblocking(False)
    woken, wake = os.pipe()  # not inherited by the command
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)  # so that it wakes us
    pid = fork_exec(program, arguments)
    # Signals meant for the command (the executor's SIGTERM) are passed on to it.
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda sig, _frame: os.kill(pid, sig))
    while True:
        ready, _, _ = select.select([listener.fileno(), woken], [], [])
        if woken in ready:
            os.read(woken, 4096)
        _hand_over(listener, control)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
    _hand_over(listener, control)  # what it queued as it ended
    if os.WIFSIGNALED(status):
        killed = os.WTERMSIG(status)
        signal.signal(killed, signal.SIG_DFL)
        os.kill(os.getpid(), killed)
    return os.waitstatus_to_exitcode(status)
