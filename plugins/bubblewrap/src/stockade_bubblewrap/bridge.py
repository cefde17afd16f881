"""Outside the sandbox: connections the forwarder hands over, relayed to the egress proxy.

One bridge per ``network`` command. The forwarder inside (:mod:`stockade_bubblewrap.forward`)
holds one end of a socket pair; this side receives each accepted connection's descriptor
and relays it, both ways, to the Unix socket of the proxy the host started for the
command. The relay copies with ``splice(2)`` through a pipe, so the bytes never enter
Python's memory.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading

CHUNK = 1 << 18


class Bridge:
    """Receives connections on :attr:`inside`'s peer; relays each to ``proxy_socket``."""

    def __init__(self, proxy_socket: str) -> None:
        self.proxy_socket = proxy_socket
        self.inside, self._outside = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.inside.set_inheritable(True)
        self._thread = threading.Thread(target=self._receive, daemon=True, name="egress-bridge")
        self._thread.start()

    def _receive(self) -> None:
        while True:
            try:
                message, fds, _flags, _addr = socket.recv_fds(self._outside, 16, 8)
            except OSError:
                return
            if not message and not fds:
                return  # the forwarder is gone
            for fd in fds:
                client = socket.socket(fileno=fd)
                threading.Thread(
                    target=_relay, args=(client, self.proxy_socket), daemon=True
                ).start()

    def close(self) -> None:
        """Stop receiving (the command has ended); relays in flight end with their sockets."""
        with contextlib.suppress(OSError):
            self.inside.close()
        with contextlib.suppress(OSError):
            self._outside.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self._outside.close()


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
