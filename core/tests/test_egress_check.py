"""The egress proxy's per-connection check (the breaker where bytes leave): asked on every
connection its rules allow, when it is made, for tunnels and forwarded requests alike."""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest

from stockade.egress.proxy import Connection, Proxy, parse_hosts
from stockade.testing import listening


@pytest.fixture
def listener():
    """A loopback TCP listener that keeps what every connection sent."""
    got: list[bytes] = []

    def serve_one(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(0.5)
            data = b""
            try:
                while chunk := conn.recv(65536):
                    data += chunk
                    if b"\r\n\r\n" in data:
                        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        break
            except OSError:
                pass
            got.append(data)

    server = listening(serve_one, threaded=False)
    yield server.getsockname()[1], got
    server.close()


def ask(proxy_port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=5) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
    return b"".join(chunks)


def test_each_connection_is_checked_when_it_is_made(listener) -> None:
    port, got = listener
    answers: list[str | None] = [None, "the breaker: both", None]
    asked: list[int] = []
    seen: list[Connection] = []

    def check() -> str | None:
        asked.append(1)
        return answers[len(asked) - 1]

    with Proxy(
        parse_hosts([f"allowed.test:{port}"]),
        resolve={"allowed.test": "127.0.0.1"},
        on_connection=seen.append,
        check=check,
    ) as proxy:
        proxy_port = proxy.serve_tcp()
        forward = f"POST http://allowed.test:{port}/x HTTP/1.1\r\nHost: allowed.test:{port}\r\n"
        request = (forward + "Content-Length: 6\r\n\r\nsecret").encode()
        assert ask(proxy_port, request).endswith(b"ok")  # clean: on its way
        refused = ask(proxy_port, request)  # the run now holds both: refused, nothing sent
        assert refused.startswith(b"HTTP/1.1 403 Forbidden")
        assert b"stockade egress proxy: the breaker: both" in refused
        tunnel = ask(proxy_port, f"CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n".encode())
        assert tunnel.startswith(b"HTTP/1.1 200 Connection established")
        elsewhere = ask(proxy_port, b"CONNECT other.test:443 HTTP/1.1\r\n\r\n")
        assert elsewhere.startswith(b"HTTP/1.1 403")  # the rules refuse first: not asked
    assert len(asked) == 3
    assert sorted(c.allowed for c in seen) == [False, False, True, True]  # reported as each ends
    mine = [c for c in seen if c.reason == "the breaker: both"]
    assert len(mine) == 1 and (mine[0].allowed, mine[0].bytes_up) == (False, 0)
    assert sum(b"secret" in data for data in got) == 1


@pytest.fixture
def kept_listener():
    """A loopback HTTP/1.1 listener that answers every whole request (its body too) on a
    connection it keeps, and keeps everything each connection sent."""
    got: list[bytearray] = []

    def serve_one(conn: socket.socket) -> None:
        data = bytearray()
        got.append(data)
        with conn:
            done = 0  # where the next request begins
            while chunk := conn.recv(65536):
                data += chunk
                while (end := data.find(b"\r\n\r\n", done)) >= 0:
                    head = bytes(data[done:end]).lower()
                    size = int(head.partition(b"content-length:")[2].split(b"\r")[0] or 0)
                    if len(data) < end + 4 + size:
                        break  # answered once its whole body came
                    done = end + 4 + size
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    server = listening(serve_one)
    yield server.getsockname()[1], got
    server.close()


def test_a_tunnel_opened_clean_sends_nothing_once_the_check_refuses(kept_listener) -> None:
    """The check is asked again before each read of the client's bytes goes upstream: a kept
    tunnel carries its first request, then is cut; nothing of the second leaves."""
    port, got = kept_listener
    refuse: list[str] = []
    seen: list[Connection] = []
    with Proxy(
        parse_hosts([f"allowed.test:{port}"]),
        resolve={"allowed.test": "127.0.0.1"},
        on_connection=seen.append,
        check=lambda: refuse[0] if refuse else None,
    ) as proxy:
        sock = socket.create_connection(("127.0.0.1", proxy.serve_tcp()), timeout=5)
        with sock:
            sock.sendall(f"CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n".encode())
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 Connection established")
            request = f"GET /a HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n".encode()
            sock.sendall(request)
            assert sock.recv(4096).endswith(b"ok")  # clean: the first request went
            refuse.append("the breaker: both")  # the run comes to hold both
            sock.sendall(request.replace(b"/a", b"/secret"))
            rest = b""
            with contextlib.suppress(OSError):
                while data := sock.recv(4096):
                    rest += data
        assert rest == b""  # cut: something came down already, so no answer fits
    assert [bytes(data).count(b"GET /") for data in got] == [1]
    assert not any(b"secret" in data for data in got)
    [connection] = seen
    assert (connection.allowed, connection.reason) == (False, "the breaker: both")
    assert connection.bytes_up == len(request)


def test_a_forwarded_body_sends_nothing_more_once_the_check_refuses(kept_listener) -> None:
    """A forwarded request whose body is still coming when the run comes to hold both: the
    rest of the body never leaves, and the client is answered 403 (no answer had begun)."""
    port, got = kept_listener
    refuse: list[str] = []
    seen: list[Connection] = []
    with (
        Proxy(
            parse_hosts([f"allowed.test:{port}"]),
            resolve={"allowed.test": "127.0.0.1"},
            on_connection=seen.append,
            check=lambda: refuse[0] if refuse else None,
        ) as proxy,
        socket.create_connection(("127.0.0.1", proxy.serve_tcp()), timeout=5) as sock,
    ):
        sock.sendall(
            f"POST http://allowed.test:{port}/x HTTP/1.1\r\nHost: allowed.test:{port}\r\n"
            "Content-Length: 12\r\n\r\nclean-".encode()
        )
        for _ in range(100):  # the head and the clean half reached the upstream
            if got and b"clean-" in got[0]:
                break
            threading.Event().wait(0.05)
        refuse.append("the breaker: both")
        sock.sendall(b"secret")
        answer = b""
        with contextlib.suppress(OSError):
            while data := sock.recv(4096):
                answer += data
    assert answer.startswith(b"HTTP/1.1 403 Forbidden"), answer
    assert b"the breaker: both" in answer
    assert [b"clean-" in data for data in got] == [True]
    assert not any(b"secret" in data for data in got)
    [connection] = seen
    assert (connection.allowed, connection.reason) == (False, "the breaker: both")
