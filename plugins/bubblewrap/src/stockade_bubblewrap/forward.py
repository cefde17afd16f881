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
import signal
import socket
import threading
from collections.abc import Callable, Sequence


def _hand_over(listener: socket.socket, control: socket.socket) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        try:
            socket.send_fds(control, [b"c"], [client.fileno()])
        except OSError:
            return
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
    connections over until it ends; its status is ours."""
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
    pid = fork_exec(program, arguments)
    threading.Thread(target=_hand_over, args=(listener, control), daemon=True).start()
    # Signals meant for the command (the executor's SIGTERM) are passed on to it.
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda sig, _frame: os.kill(pid, sig))
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        killed = os.WTERMSIG(status)
        signal.signal(killed, signal.SIG_DFL)
        os.kill(os.getpid(), killed)
    return os.waitstatus_to_exitcode(status)
