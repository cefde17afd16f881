"""A live HTTPS upstream on loopback that records every request and echoes it back.

For the credential-injection tests: it keeps what it received (so a test sees whether the
secret arrived), and its answers echo the request's headers in a response header and in
the body, in the ways that could carry a secret back to the command: with a
``Content-Length``, chunked with the secret split across chunks, close-delimited, and
gzip-compressed. ``/redirect?to=URL`` answers 302; ``.../info/refs`` without an
``Authorization`` answers 401 (so ``git`` sends its credentials).
"""

from __future__ import annotations

import gzip
import http.server
import json
import ssl
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from stockade.testing import self_signed_cert


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def _record(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append(
            {"method": self.command, "path": self.path, "headers": list(self.headers.items()),
             "body": body.decode("latin-1")}
        )  # fmt: skip
        return body

    def do_GET(self) -> None:
        body = self._record()
        echo = json.dumps(
            {
                "path": self.path,
                "headers": dict(self.headers.items()),
                "body": body.decode("latin-1"),
            }
        ).encode()
        auth = self.headers.get("Authorization", "")
        path = urlsplit(self.path).path
        if path.endswith("/info/refs") and not auth:  # git asks again, with credentials
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="echo"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path == "/redirect":
            target = parse_qs(urlsplit(self.path).query)["to"][0]
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("X-Echo-Authorization", auth)
        if path == "/chunked":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            data = b"auth=" + auth.encode() + b"\n" + echo
            middle = 5 + len(auth) // 2  # the secret split across two chunks
            for part in (data[:middle], data[middle:]):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\nX-Trailer: " + auth.encode() + b"\r\n\r\n")
            return
        if path == "/gzip":
            packed = gzip.compress(echo)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(packed)))
            self.end_headers()
            self.wfile.write(packed)
            return
        if path == "/close":
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(echo)
            self.close_connection = True
            return
        self.send_header("Content-Length", str(len(echo)))
        self.end_headers()
        self.wfile.write(echo)

    do_POST = do_GET  # noqa: N815 - the name http.server calls

    def log_message(self, *_args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    seen: list[dict[str, object]]


class EchoUpstream:
    """An HTTPS echo server on 127.0.0.1 for ``names``; ``cafile`` is its certificate.
    ``tls=False``: plain HTTP (no ``cafile``)."""

    def __init__(
        self, folder: Path, names: tuple[str, ...] = ("bound.test",), *, tls: bool = True
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.seen = []
        self.cafile = ""
        if tls:
            self.cafile, key = self_signed_cert(folder, names)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.cafile, key)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port: int = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def seen(self) -> list[dict[str, object]]:
        """Every request received, in order."""
        return self.server.seen

    def received(self) -> str:
        """Everything received, as one text (to look for a secret in)."""
        return json.dumps(self.seen)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
