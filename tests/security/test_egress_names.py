"""One name per connection, from inside each sandbox: the SNI inside a CONNECT tunnel must be
the CONNECT host, a forwarded request's Host must be its target, and a malformed request gets
400 and an event. Live loopback upstreams record what reaches them: each attack has its
control (the same client, the right name, through the same proxy, reaching the same server).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator

import pytest

from stockade.testing import self_signed_cert

from .conftest import PYTHON
from .test_egress import Fetcher, config_for

# argv: target, server name ("-" for none), CA file. Prints the proxy's status line, then
# what came back through TLS or why the handshake failed.
TLS_CLIENT = r"""
import os, socket, ssl, sys
address = os.environ["HTTP_PROXY"].split("//")[1].rstrip("/")
host, port = address.rsplit(":", 1)
target, sni, cafile = sys.argv[1], sys.argv[2], sys.argv[3]
s = socket.create_connection((host, int(port)), timeout=20)
s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
head = b""
while b"\r\n\r\n" not in head:
    data = s.recv(1)
    if not data:
        break
    head += data
print("STATUS", head.split(b"\r\n")[0].decode())
context = ssl.create_default_context(cafile=cafile)
context.check_hostname = False
try:
    with context.wrap_socket(s, server_hostname=None if sni == "-" else sni) as tls:
        tls.sendall(b"GET / HTTP/1.0\r\n\r\n")
        reply = b""
        while data := tls.recv(4096):
            reply += data
        print("REPLY", reply.decode(errors="replace"))
except (ssl.SSLError, OSError) as error:
    print("REFUSED", error)
"""

# argv: the request as hex. Prints what the proxy answered.
RAW_CLIENT = r"""
import os, socket, sys
address = os.environ["HTTP_PROXY"].split("//")[1].rstrip("/")
host, port = address.rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=20)
s.sendall(bytes.fromhex(sys.argv[1]))
reply = b""
while data := s.recv(65536):
    reply += data
print(reply.decode("latin-1"))
"""


class TlsUpstream:
    """A TLS server for allowed.test and other.test that records each handshake's SNI."""

    def __init__(self, folder) -> None:
        cert, key = self_signed_cert(folder, ("allowed.test", "other.test"))
        self.cafile = cert
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.names: list[str | None] = []
        self.context.sni_callback = lambda _s, name, _c: self.names.append(name)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            conn.settimeout(20)
            with self.context.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1024)
                tls.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nsecure")


class RawUpstream:
    """A plain TCP server that keeps every byte it receives and answers each request head."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received: list[bytearray] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            got = bytearray()
            self.received.append(got)
            with contextlib.suppress(OSError), conn:
                conn.settimeout(20)
                while data := conn.recv(65536):
                    got += data
                    if got.endswith(b"\r\n\r\n"):
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nupstream")
                        break

    @property
    def everything(self) -> bytes:
        return b"".join(self.received)


@pytest.fixture
def tls_upstream(box) -> Iterator[TlsUpstream]:
    server = TlsUpstream(box.ws)  # the CA file must be readable inside the sandbox
    yield server
    server.sock.close()


@pytest.fixture
def raw_upstream() -> Iterator[RawUpstream]:
    server = RawUpstream()
    yield server
    server.sock.close()


def connections(event_log, result):
    return [
        e for e in event_log.events if e.kind == "connection" and e.action_id == result.action_id
    ]


def tls_run(box, host, upstream, sni):
    script = box.ws / "tls_client.py"
    script.write_text(TLS_CLIENT)
    target = f"allowed.test:{upstream.port}"
    argv = [PYTHON, "-S", str(script), target, sni, upstream.cafile]
    return host.run(box.request(argv, profile="net"))


def raw_run(box, host, request: bytes):
    script = box.ws / "raw_client.py"
    script.write_text(RAW_CLIENT)
    return host.run(box.request([PYTHON, "-S", str(script), request.hex()], profile="net"))


def test_a_tunnel_carries_tls_only_for_its_own_name(box, make_host, event_log, tls_upstream):
    host = make_host(config=config_for(box, tls_upstream.port), plugins=[Fetcher(), event_log])
    # Control: the CONNECT host's own name goes through, and the listener sees it.
    ok = tls_run(box, host, tls_upstream, "allowed.test")
    assert "REPLY HTTP/1.0 200 OK" in ok.stdout.text, ok.stdout.text + ok.stderr.text
    assert "secure" in ok.stdout.text
    assert tls_upstream.names == ["allowed.test"]
    (good,) = connections(event_log, ok)
    assert good.allowed
    # Attack: the same tunnel, TLS for another name on the same address (domain fronting).
    fronted = tls_run(box, host, tls_upstream, "other.test")
    assert "STATUS HTTP/1.1 200" in fronted.stdout.text, fronted.stdout.text
    assert "REFUSED" in fronted.stdout.text
    assert "secure" not in fronted.stdout.text
    assert tls_upstream.names == ["allowed.test"]  # the other name never reached the server
    (refused,) = connections(event_log, fronted)
    assert not refused.allowed
    assert refused.bytes_up == 0
    assert "'other.test' (SNI)" in refused.reason
    assert "tunnel to allowed.test" in refused.reason
    # Neighbours: no SNI at all, and a name that merely ends like the allowed one.
    for sni in ("-", "xallowed.test", "allowed.test.other.test"):
        tried = tls_run(box, host, tls_upstream, sni)
        assert "REFUSED" in tried.stdout.text, (sni, tried.stdout.text)
        assert not connections(event_log, tried)[0].allowed
    assert tls_upstream.names == ["allowed.test"]


def test_plain_http_host_must_name_the_target(box, make_host, event_log, raw_upstream):
    host = make_host(config=config_for(box, raw_upstream.port), plugins=[Fetcher(), event_log])
    target = f"allowed.test:{raw_upstream.port}"
    line = f"GET http://{target}/ HTTP/1.1\r\n"
    ok = raw_run(box, host, f"{line}Host: {target}\r\n\r\n".encode())
    assert ok.stdout.text.startswith("HTTP/1.1 200"), ok.stdout.text + ok.stderr.text
    assert "upstream" in ok.stdout.text
    assert connections(event_log, ok)[0].allowed
    fronted = raw_run(box, host, f"{line}Host: other.test\r\n\r\n".encode())
    assert fronted.stdout.text.startswith("HTTP/1.1 403 Forbidden"), fronted.stdout.text
    assert "stockade egress proxy: the Host header names 'other.test'" in fronted.stdout.text
    (refused,) = connections(event_log, fronted)
    assert not refused.allowed
    assert "'other.test' but the request is for" in refused.reason
    assert len(raw_upstream.received) == 1
    assert b"other.test" not in raw_upstream.everything


def test_a_malformed_request_gets_400_and_an_event(box, make_host, event_log, capfd):
    host = make_host(config=config_for(box, 8080), plugins=[Fetcher(), event_log])
    done = raw_run(box, host, b"GET http://[zz/ HTTP/1.1\r\nHost: x\r\n\r\n")
    assert done.stdout.text.startswith("HTTP/1.1 400 Bad Request"), done.stdout.text
    assert "stockade egress proxy: malformed host '[zz'" in done.stdout.text
    (event,) = connections(event_log, done)
    assert not event.allowed
    assert "malformed host" in event.reason
    assert "Traceback" not in capfd.readouterr().err


def test_a_bare_lf_cannot_smuggle_a_header(box, make_host, event_log, raw_upstream):
    host = make_host(config=config_for(box, raw_upstream.port), plugins=[Fetcher(), event_log])
    target = f"allowed.test:{raw_upstream.port}"
    # Control: the same request with CRLF reaches the upstream, X-A and all.
    ok = raw_run(
        box, host, f"GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\nX-A: 1\r\n\r\n".encode()
    )
    assert "upstream" in ok.stdout.text, ok.stdout.text + ok.stderr.text
    assert b"\r\nX-A: 1\r\n" in raw_upstream.everything
    smuggled = raw_run(
        box, host, f"GET http://{target}/ HTTP/1.1\r\nX-A: 1\nHost: other.test\r\n\r\n".encode()
    )
    assert smuggled.stdout.text.startswith("HTTP/1.1 400"), smuggled.stdout.text
    (event,) = connections(event_log, smuggled)
    assert "bare CR or LF" in event.reason
    assert len(raw_upstream.received) == 1
    assert b"other.test" not in raw_upstream.everything


# argv: target, first flight (hex), how many bytes to read back, second flight (hex).
TWO_FLIGHTS = r"""
import os, socket, sys
address = os.environ["HTTP_PROXY"].split("//")[1].rstrip("/")
host, port = address.rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=20)
s.sendall(f"CONNECT {sys.argv[1]} HTTP/1.1\r\nHost: {sys.argv[1]}\r\n\r\n".encode())
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
s.sendall(bytes.fromhex(sys.argv[2]))
got = b""
while len(got) < int(sys.argv[3]):
    got += s.recv(100)
print("HEARD", got.hex())
s.sendall(bytes.fromhex(sys.argv[4]))
s.shutdown(socket.SHUT_WR)
reply = b""
while data := s.recv(100):
    reply += data
print("REPLY", reply.hex())
"""

HRR_RANDOM = "cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c"
HRR = bytes.fromhex("160303003402000030" + "0303" + HRR_RANDOM) + bytes(14)  # HelloRetryRequest


def _hello(name: bytes) -> bytes:
    """One TLS record holding a minimal ClientHello for ``name``."""

    def vec(width: int, data: bytes) -> bytes:
        return len(data).to_bytes(width, "big") + data

    sni = vec(2, b"\x00" + vec(2, name))
    body = b"\x03\x03" + bytes(32) + vec(1, b"") + vec(2, b"\x13\x01") + vec(1, b"\x00")
    body += vec(2, b"\x00\x00" + vec(2, sni))
    message = b"\x01" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x01" + vec(2, message)


class RetryingUpstream(RawUpstream):
    """Answers a tunnel's first bytes with a HelloRetryRequest and keeps everything after."""

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            got = bytearray()
            self.received.append(got)
            with contextlib.suppress(OSError), conn:
                conn.settimeout(20)
                got += conn.recv(65536)
                conn.sendall(HRR)
                while data := conn.recv(65536):
                    got += data


def test_a_second_client_hello_cannot_change_the_name(box, make_host, event_log):
    upstream = RetryingUpstream()
    try:
        host = make_host(config=config_for(box, upstream.port), plugins=[Fetcher(), event_log])
        script = box.ws / "two_flights.py"
        script.write_text(TWO_FLIGHTS)
        target = f"allowed.test:{upstream.port}"

        def run(second: bytes):
            argv = [PYTHON, "-S", str(script), target, _hello(b"allowed.test").hex()]
            argv += [str(len(HRR)), _hello(second).hex()]
            return host.run(box.request(argv, profile="net"))

        # Control: after the server's retry request, the same name again goes through.
        ok = run(b"allowed.test")
        assert f"HEARD {HRR.hex()}" in ok.stdout.text, ok.stdout.text + ok.stderr.text
        assert upstream.received[0].endswith(_hello(b"allowed.test"))
        assert connections(event_log, ok)[0].allowed
        # Attack: the second ClientHello asks for another name; it never reaches the server.
        fronted = run(b"other.test")
        assert f"HEARD {HRR.hex()}" in fronted.stdout.text, fronted.stdout.text
        assert "REPLY 15030300020231" in fronted.stdout.text  # the access_denied alert
        (refused,) = connections(event_log, fronted)
        assert not refused.allowed
        assert "second ClientHello" in refused.reason
        assert b"other.test" not in upstream.everything
    finally:
        upstream.sock.close()


def test_plain_http_inside_a_tunnel_keeps_its_host(box, make_host, event_log, raw_upstream):
    host = make_host(config=config_for(box, raw_upstream.port), plugins=[Fetcher(), event_log])
    target = f"allowed.test:{raw_upstream.port}"
    connect = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"
    ok = raw_run(box, host, f"{connect}GET / HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    assert "HTTP/1.1 200 Connection established" in ok.stdout.text, ok.stdout.text
    assert ok.stdout.text.rstrip().endswith("upstream"), ok.stdout.text + ok.stderr.text
    assert connections(event_log, ok)[0].allowed
    # The same tunnel, a request for another name (and one with a trailing space that a
    # lenient server would take as HTTP): refused inside the tunnel, never sent.
    for line in ("GET / HTTP/1.1", "GET / HTTP/1.1 "):
        fronted = raw_run(box, host, f"{connect}{line}\r\nHost: other.test\r\n\r\n".encode())
        assert "stockade egress proxy:" in fronted.stdout.text, fronted.stdout.text
        assert "upstream" not in fronted.stdout.text
        assert not connections(event_log, fronted)[0].allowed
    # The tunnels were opened (a connect), but no byte of a refused request reached it.
    assert [bytes(got) for got in raw_upstream.received if got] == [
        f"GET / HTTP/1.1\r\nHost: {target}\r\n\r\n".encode()
    ]
