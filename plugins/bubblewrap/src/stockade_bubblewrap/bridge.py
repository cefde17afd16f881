"""Outside the sandbox: connections the forwarder hands over, relayed to the egress proxy.

One bridge per ``network`` command. The forwarder inside (:mod:`stockade_bubblewrap.forward`)
holds one end of a socket pair; this side receives each accepted connection's descriptor
and relays it, both ways, to the Unix socket of the proxy the host started for the
command. The relay copies with ``splice(2)`` through a pipe, so the bytes never enter
Python's memory.

The control socket is the sandbox's: treat what arrives on it as hostile. A descriptor is
relayed only if it is a connected TCP stream (``AF_INET``/``AF_INET6``, ``SOCK_STREAM``,
``IPPROTO_TCP``), the only kind the forwarder sends; any other descriptor is closed at once.
Received descriptors are close-on-exec from the moment they arrive, at most
:data:`MAX_FDS` are taken per message (the kernel closes the rest), and no input (garbage
bytes, a truncated message, a pipe, a listening socket) stops the bridge from serving the
next connection.
"""

from __future__ import annotations

import array
import contextlib
import os
import socket
import stat
import struct
import threading

CHUNK = 1 << 18
MAX_FDS = 8
"""Descriptors taken from one message; the forwarder sends one."""
_INT = array.array("i").itemsize
_ANCILLARY = socket.CMSG_SPACE(MAX_FDS * _INT)
_NO_LINGER = struct.pack("ii", 0, 0)


class Bridge:
    """Receives connections on :attr:`inside`'s peer; relays each to ``proxy_socket``."""

    def __init__(self, proxy_socket: str) -> None:
        self.proxy_socket = proxy_socket
        self.inside, self._outside = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.inside.set_inheritable(True)
        self.refused = 0
        """Descriptors received and closed because they were not a connected TCP stream."""
        self._thread = threading.Thread(target=self._receive, daemon=True, name="egress-bridge")
        self._thread.start()

    def _receive(self) -> None:
        while True:
            try:
                data, ancillary, flags, _addr = self._outside.recvmsg(
                    4096, _ANCILLARY, socket.MSG_CMSG_CLOEXEC
                )
            except InterruptedError:
                continue
            except OSError:
                return
            fds = received_fds(ancillary)
            if not data and not fds and not flags & socket.MSG_CTRUNC:
                return  # the forwarder is gone
            for fd in fds:
                client = accepted(fd)
                if client is None:
                    self.refused += 1
                    continue
                relay = threading.Thread(
                    target=_relay, args=(client, self.proxy_socket), daemon=True
                )
                try:
                    relay.start()
                except RuntimeError:  # no thread to spare: this connection is dropped
                    client.close()

    def close(self) -> None:
        """Stop receiving (the command has ended); relays in flight end with their sockets."""
        with contextlib.suppress(OSError):
            self.inside.close()
        with contextlib.suppress(OSError):
            self._outside.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self._outside.close()


def received_fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    """Every descriptor in ``SCM_RIGHTS`` entries; a ragged tail (a cut entry) is dropped."""
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            numbers = array.array("i")
            numbers.frombytes(data[: len(data) - len(data) % _INT])
            fds.extend(numbers)
    return fds


def accepted(fd: int) -> socket.socket | None:
    """``fd`` as a socket if it is a connected TCP stream; otherwise ``None``, and it is closed.

    Takes ownership of ``fd`` either way.
    """
    try:
        if stat.S_ISSOCK(os.fstat(fd).st_mode):
            sock = socket.socket(fileno=fd)
            if _is_tcp_connection(sock):
                return sock
            # A refused socket must not hold this thread in close() (SO_LINGER).
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _NO_LINGER)
            sock.close()
            return None
    except OSError:
        pass
    with contextlib.suppress(OSError):
        os.close(fd)
    return None


def _is_tcp_connection(sock: socket.socket) -> bool:
    try:
        return (
            sock.family in (socket.AF_INET, socket.AF_INET6)
            and sock.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE) == socket.SOCK_STREAM
            and sock.getsockopt(socket.SOL_SOCKET, socket.SO_PROTOCOL) == socket.IPPROTO_TCP
            and not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            and bool(sock.getpeername())
        )
    except OSError:  # not connected: getpeername fails
        return False


def _relay(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def pump(source: socket.socket, target: socket.socket) -> None:
    """Copy ``source`` to ``target`` until end of file, then half-close ``target``."""
    reader, writer = os.pipe()
    try:
        while True:
            moved = os.splice(source.fileno(), writer, CHUNK)
            if moved == 0:
                break
            while moved:
                moved -= os.splice(reader, target.fileno(), moved)
    except OSError:
        pass
    finally:
        os.close(reader)
        os.close(writer)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)
