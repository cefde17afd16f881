"""A live host socket that counts what reaches it: the kit's listener for network attacks.

Stream sockets count accepted connections, datagram sockets count datagrams. A test plants
one where a confined command must not reach it (and checks ``hits`` stays 0), beside a
control that does reach it.
"""

from __future__ import annotations

import socket
import threading
from typing import Any


class Listener:
    """A host socket (``family``, ``kind``) bound to ``address`` that counts what reaches it.

    ``address`` is what :meth:`socket.socket.bind` takes: ``(host, port)`` (port 0 picks
    one), a Unix socket path, or an abstract name starting with a NUL.
    """

    def __init__(self, family: int, kind: int, address: str | tuple[str, int]) -> None:
        self.sock = socket.socket(family, kind)
        self.sock.bind(address)
        if kind == socket.SOCK_STREAM:
            self.sock.listen(64)
        self.sock.settimeout(0.2)  # to look at the stop flag
        self.hits = 0
        self.kind = kind
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def address(self) -> Any:  # noqa: ANN401 - what getsockname gives: a tuple or a path
        """Where it listens (``getsockname``)."""
        return self.sock.getsockname()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                if self.kind == socket.SOCK_STREAM:
                    conn, _ = self.sock.accept()
                    conn.close()
                else:
                    self.sock.recv(64)
                self.hits += 1
            except OSError:  # the timeout (TimeoutError is one), or a closed socket
                continue

    def close(self) -> None:
        """Stop counting and close the socket."""
        self._stop.set()
        self._thread.join()
        self.sock.close()
