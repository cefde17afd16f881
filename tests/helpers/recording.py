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
    """A loopback HTTP server that keeps every request's path and body."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[bytes] = []
        self.waiting = threading.Event()  # set when a request to /wait arrived
        self.go_on = threading.Event()  # a request to /wait is answered once this is set

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Upstream

    def _answer(self) -> None:
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


def serving() -> Iterator[Upstream]:
    """A running :class:`Upstream` (``tests/conftest.py``'s ``upstream`` fixture), shut down
    after the test."""
    server = Upstream()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def post(port: int, what: str) -> list[str]:
    """A ``network`` step that posts ``what`` (curl's ``--data-binary``) to the upstream."""
    return [CURL, "-sS", "--max-time", "20", "--data-binary", what, f"http://allowed.test:{port}/"]
