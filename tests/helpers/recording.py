"""A live loopback HTTP upstream that keeps every request it got, for the breaker's tests.

Each request is kept as ``path + b" " + body`` (GET, POST and PUT), so an attack passes only when
nothing reached it, and its control shows what did. :func:`post` is the ``network`` step
that sends to it, through the egress proxy, by the name the profiles allow.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

CURL = "/usr/bin/curl"


class Upstream(http.server.ThreadingHTTPServer):
    """A loopback HTTP server that keeps every request's path and body. ``keep_alive``: it
    speaks HTTP/1.1, so a client may send several requests on one connection; ``peers`` has
    each request's client port (one connection, or several)."""

    def __init__(self, *, keep_alive: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _KeptHandler if keep_alive else _Handler)
        self.seen: list[bytes] = []
        self.peers: list[int] = []
        self.waiting = threading.Event()  # set when a request to /wait arrived
        self.go_on = threading.Event()  # a request to /wait is answered once this is set

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Upstream

    def _answer(self) -> None:
        self.server.peers.append(self.client_address[1])
        length = int(self.headers.get("Content-Length") or 0)
        self.server.seen.append(self.path.encode() + b" " + self.rfile.read(length))
        if self.path == "/wait":  # holds the client until the test has changed the run
            self.server.waiting.set()
            self.server.go_on.wait(30)
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_PUT(self) -> None:
        self._answer()

    def log_message(self, *_args: object) -> None:
        pass


class _KeptHandler(_Handler):
    protocol_version = "HTTP/1.1"


def serving(*, keep_alive: bool = False) -> Iterator[Upstream]:
    """A running :class:`Upstream` (``tests/conftest.py``'s ``upstream`` fixture), shut down
    after the test."""
    server = Upstream(keep_alive=keep_alive)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def post(port: int, what: str) -> list[str]:
    """A ``network`` step that posts ``what`` (curl's ``--data-binary``) to the upstream."""
    return [CURL, "-sS", "--max-time", "20", "--data-binary", what, f"http://allowed.test:{port}/"]


def kept_then_puts(port: int, path: str) -> list[str]:
    """A ``network`` step that opens one tunnel (``-p``), asks ``/wait`` (answered when the
    test says), then uploads ``path`` (read when that transfer starts) over the same
    connection, kept alive (with an upstream :func:`serving` ``keep_alive``)."""
    base = f"http://allowed.test:{port}"
    curl = [CURL, "-sS", "-p", "--max-time", "30"]
    return [*curl, f"{base}/wait", "--next", *curl[1:], "-T", path, f"{base}/up"]
