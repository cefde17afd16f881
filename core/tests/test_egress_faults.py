"""The egress proxy when things go wrong, and its lifecycle: malformed and slow requests,
an upstream that refuses, a failing callback; closing ends open tunnels, and proxies share
one thread."""

import contextlib
import socket
import threading
import time

import pytest
from egress_helpers import _head, _raw

from stockade.egress import proxy as egress
from stockade.egress.proxy import Proxy, parse_hosts

pytestmark = pytest.mark.usefixtures("_no_ambient_proxy")


# --- malformed, bounded, failing ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"NONSENSE\r\n\r\n", b"400"),
        (b"CONNECT allowed.test HTTP/1.1\r\n\r\n", b"400"),
        (b"CONNECT allowed.test:99999 HTTP/1.1\r\n\r\n", b"400"),
        (b"GET /relative HTTP/1.1\r\n\r\n", b"400"),
        (b"GET https://allowed.test/ HTTP/1.1\r\n\r\n", b"400"),
        (b"GET http://allowed.test/ SPDY/3\r\n\r\n", b"400"),
        (b"GET http://allowed.test/ HTTP/1.1\r\nno colon here\r\n\r\n", b"400"),
        (b"GET http://allowed.test/ HTTP/1.1\r\nX: " + b"a" * 20000, b"431"),
    ],
)
def test_malformed_requests(make_proxy, request_bytes, status):
    proxy, recorder = make_proxy(["allowed.test"])
    reply = _raw(proxy.serve_tcp(), request_bytes)
    assert reply.startswith(b"HTTP/1.1 " + status), reply[:200]
    assert b"stockade" in reply
    assert not recorder.wait().allowed


def test_a_slow_client_times_out(make_proxy, monkeypatch):
    monkeypatch.setattr(egress, "HEAD_TIMEOUT_S", 0.3)
    proxy, recorder = make_proxy(["allowed.test"])
    start = time.monotonic()
    reply = _raw(proxy.serve_tcp(), b"CONNECT allowed.te")
    assert reply.startswith(b"HTTP/1.1 408")
    assert time.monotonic() - start < 3
    assert "0.3 s" in recorder.wait().reason


def test_upstream_connect_failure_is_502(make_proxy):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    proxy, recorder = make_proxy([f"allowed.test:{port}"])
    reply = _raw(proxy.serve_tcp(), f"CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 502")
    assert b"refused" in reply.lower()
    seen = recorder.wait()
    assert "connecting failed" in seen.reason


def test_a_silent_client_leaves_no_event(make_proxy):
    proxy, recorder = make_proxy(["allowed.test"])
    socket.create_connection(("127.0.0.1", proxy.serve_tcp()), timeout=5).close()
    time.sleep(0.2)
    assert recorder.connections == []


# --- lifecycle ---------------------------------------------------------------------------------


def test_close_ends_open_tunnels(make_proxy, echo_port):
    proxy, recorder = make_proxy([f"allowed.test:{echo_port}"])
    proxy_port = proxy.serve_tcp()
    sock = socket.create_connection(("127.0.0.1", proxy_port), timeout=5)
    sock.sendall(f"CONNECT allowed.test:{echo_port} HTTP/1.1\r\n\r\n".encode())
    assert _head(sock).startswith(b"HTTP/1.1 200")
    sock.sendall(b"abc\n")
    assert sock.recv(4) == b"abc\n"
    proxy.close()
    with contextlib.suppress(ConnectionResetError):
        assert sock.recv(10) == b""
    sock.close()
    seen = recorder.wait()
    assert seen.allowed
    assert (seen.bytes_up, seen.bytes_down) == (4, 4)
    assert "closing the proxy" in seen.reason
    proxy.close()  # idempotent
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", proxy_port), timeout=5)
    with pytest.raises(RuntimeError):
        proxy.serve_tcp()


def test_a_failing_callback_does_not_kill_the_proxy(echo_port, capfd):
    def boom(connection):
        raise ValueError("callback broke")

    proxy = Proxy(parse_hosts(["github.com"]), on_connection=boom)
    try:
        proxy_port = proxy.serve_tcp()
        for _ in range(2):
            assert _raw(proxy_port, b"CONNECT evil.com:443 HTTP/1.1\r\n\r\n").startswith(
                b"HTTP/1.1 403"
            )
    finally:
        proxy.close()
    assert "callback broke" in capfd.readouterr().err


def test_proxies_share_one_thread(make_proxy):
    first, _ = make_proxy(["a.example.com"])
    second, _ = make_proxy(["b.example.com"])
    first.serve_tcp()
    second.serve_tcp()
    assert [t.name for t in threading.enumerate()].count("stockade-egress") == 1
    reply = _raw(second.serve_tcp(), b"CONNECT a.example.com:443 HTTP/1.1\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 403")
