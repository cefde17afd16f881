"""Plain HTTP inside a CONNECT tunnel: told apart from other protocols, each request's Host
checked, bodies framed so none can hide a request; fuzzed for its one error."""

import contextlib
import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.egress.http import Refusal, TunnelHttp, request_line_kind
from stockade.egress.proxy import Proxy, parse_hosts


def feed_all(reader, data, step):
    out = b""
    for at in range(0, len(data), step):
        out += reader.feed(data[at : at + step])
    return out


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"GET / HTTP/1.1\r\n", True),
        (b"GET / HTTP/1.1 \r\n", True),  # lenient servers take these: so does the check
        (b"GET  /  http/1.1\n", True),
        (b"GET / HTTP/", True),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", True),
        (b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3\r\n", False),
        (b"EHLO client.test\r\n", False),
        (b"*1\r\n$4\r\nPING\r\n", False),
        (b"\x00\x00\x00\x08\x04\xd2\x16\x2f", False),
        (b" GET / HTTP/1.1\r\n", False),
        (b"GE", None),
        (b"GET / HTTP", None),
        (b"A" * 20000, True),
    ],
)
def test_request_line_kind(data, kind):
    assert request_line_kind(data) is kind


def test_tunnel_requests_for_the_host_pass_one_after_another():
    tunnel = TunnelHttp("a.test", 8080)
    first = b"POST /x HTTP/1.1\r\nHost: a.test:8080\r\nContent-Length: 3\r\n\r\nabc"
    second = b"GET /y HTTP/1.1\r\nHOST: A.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    assert feed_all(tunnel, first + second, 1) == first + second
    assert TunnelHttp("a.test", 8080).feed(first + second) == first + second


@pytest.mark.parametrize(
    ("request_bytes", "status", "why"),
    [
        (b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n", "403", "names 'other.test'"),
        (b"GET / HTTP/1.1\r\nHost: a.test:81\r\n\r\n", "403", "names 'a.test:81'"),
        (b"GET / HTTP/1.0\r\n\r\n", "400", "0 Host headers"),
        (b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: a.test\r\n\r\n", "400", "2 Host headers"),
        (b"GET http://other.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", "400", "origin-form"),
        (b"CONNECT other.test:80 HTTP/1.1\r\nHost: a.test\r\n\r\n", "400", "origin-form"),
        (b"GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: h2c\r\n\r\n", "400", "Upgrade"),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "400", "unsupported protocol"),
        (b"GET / HTTP/1.1\r\nX: 1\nHost: other.test\r\n\r\n", "400", "bare CR or LF"),
        (b"GET / HTTP/1.1 \r\nHost: other.test\r\n\r\n", "400", "malformed request line"),
    ],
)
def test_tunnel_requests_that_could_front_are_refused(request_bytes, status, why):
    with pytest.raises(Refusal, match=why) as info:
        TunnelHttp("a.test", 80).feed(request_bytes)
    assert info.value.status.startswith(status)


def test_a_second_request_for_another_host_is_refused_after_the_first_passed():
    tunnel = TunnelHttp("a.test", 80)
    good = b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"
    assert tunnel.feed(good) == good
    with pytest.raises(Refusal, match=r"other\.test"):
        tunnel.feed(b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")


def test_a_body_cannot_hide_a_request():
    tunnel = TunnelHttp("a.test", 80)
    head = b"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\n"
    assert tunnel.feed(head + b"GET /") == head + b"GET /"  # five bytes of body, as declared
    with pytest.raises(Refusal, match=r"other\.test"):
        tunnel.feed(b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300), st.integers(1, 40))
def test_fuzz_tunnel_http_only_refuses_and_passes_only_its_host(data, step):
    raw = b"GET / HTTP/1.1\r\nHost: a.test\r\n" + data
    tunnel = TunnelHttp("a.test", 80)
    try:
        passed = feed_all(tunnel, raw, step)
    except Refusal:
        return
    for block in passed.split(b"\r\n\r\n"):
        for line in block.split(b"\r\n"):
            if line.lower().startswith(b"host:"):
                assert line.split(b":", 1)[1].strip().lower() in (b"a.test", b"a.test:80")


# --- through the proxy ---------------------------------------------------------------------------


class Upstream:
    """A TCP listener that keeps what each connection sends; answers if ``reply``."""

    def __init__(self, reply=b""):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received, self.reply = [], reply
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            got = bytearray()
            self.received.append(got)
            with conn, contextlib.suppress(OSError):
                conn.settimeout(10)
                while data := conn.recv(65536):
                    got += data
                    if self.reply and got.endswith(b"\r\n\r\n"):
                        conn.sendall(self.reply)
                        break


def through_tunnel(hosts, port, payload):
    seen = []
    proxy = Proxy(
        parse_hosts(hosts), resolve={"allowed.test": "127.0.0.1"}, on_connection=seen.append
    )
    try:
        with socket.create_connection(("127.0.0.1", proxy.serve_tcp()), timeout=10) as sock:
            sock.sendall(f"CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n".encode() + payload)
            sock.shutdown(socket.SHUT_WR)
            reply = b""
            with contextlib.suppress(OSError):
                while data := sock.recv(65536):
                    reply += data
    finally:
        proxy.close()
    return reply, seen[0]


def test_plain_http_in_a_tunnel_is_checked_request_by_request():
    upstream = Upstream(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    try:
        good = f"GET / HTTP/1.1\r\nHost: allowed.test:{upstream.port}\r\n\r\n".encode()
        reply, seen = through_tunnel([f"allowed.test:{upstream.port}"], upstream.port, good)
        assert reply.endswith(b"ok")
        assert seen.allowed
        assert upstream.received[0] == good
        fronted = b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n"
        reply, seen = through_tunnel([f"allowed.test:{upstream.port}"], upstream.port, fronted)
        assert b"HTTP/1.1 403 Forbidden" in reply
        assert b"stockade egress proxy: the Host header names 'other.test'" in reply
        assert not seen.allowed
        assert "in a tunnel to allowed.test" in seen.reason
    finally:
        upstream.sock.close()
    assert b"other.test" not in b"".join(upstream.received)


def test_a_second_request_in_the_tunnel_for_another_host_never_leaves():
    upstream = Upstream()  # silent: both requests arrive before any answer
    try:
        good = b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
        bad = b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n"
        reply, seen = through_tunnel([f"allowed.test:{upstream.port}"], upstream.port, good + bad)
        assert b"403 Forbidden" in reply
        assert "'other.test'" in seen.reason
    finally:
        upstream.sock.close()
    # The chunk that held both is refused whole: at most the first request went up.
    assert good.startswith(bytes(b"".join(upstream.received)))
