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

It is run as ``python -I -S forward.py PORT FD PROGRAM ARGV0 ARG...`` and uses the standard
library only: nothing from the host's environment or site-packages.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading


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


def main(argv: list[str]) -> int:
    """Listen, start the command, hand connections over until it ends; its status is ours."""
    port, control_fd, program, *arguments = argv
    _undumpable()
    control = socket.socket(fileno=int(control_fd))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(port)))
    listener.listen(128)
    pid = os.fork()
    if pid == 0:
        listener.close()
        control.close()
        try:
            os.execv(program, arguments)  # noqa: S606 - argv, no shell: the point
        except OSError as error:
            os.write(2, f"stockade-forward: cannot run {program}: {error.strerror}\n".encode())
            os._exit(127)
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
