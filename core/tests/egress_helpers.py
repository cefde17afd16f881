"""What the ``test_egress_*.py`` files that drive the proxy over real sockets share: upstream
servers on loopback, a recorder of the proxy's connections, and clients that speak to it."""

import shutil
import socket
import ssl
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CURL = shutil.which("curl")


class _Handler(BaseHTTPRequestHandler):
    seen: list  # (path, headers) of every request, shared per server class

    def do_GET(self):
        body = f"hello from {self.server.kind} {self.path}".encode()
        self.seen.append((self.path, dict(self.headers.items())))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _http_server(kind, context=None):
    handler = type("Handler", (_Handler,), {"seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.kind = kind
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server


class Recorder:
    def __init__(self):
        self.connections = []
        self.event = threading.Event()

    def __call__(self, connection):
        self.connections.append(connection)
        self.event.set()

    def wait(self, count=1, timeout=5.0):
        deadline = time.monotonic() + timeout
        while len(self.connections) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(self.connections) >= count, self.connections
        return self.connections[count - 1]


def _port(server):
    return server.server_address[1]


def _opener(proxy_port, cafile=None):
    handlers = [
        urllib.request.ProxyHandler(
            {"http": f"http://127.0.0.1:{proxy_port}", "https": f"http://127.0.0.1:{proxy_port}"}
        )
    ]
    if cafile:
        handlers.append(
            urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=cafile))
        )
    return urllib.request.build_opener(*handlers)


def _raw(proxy_port, request, *, family=socket.AF_INET, address=None):
    """Send ``request`` to the proxy, return everything it answers."""
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(address or ("127.0.0.1", proxy_port))
        sock.sendall(request)
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
    return b"".join(chunks)


def _head(sock):
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(1)
        assert data, buf
        buf += data
    return buf
