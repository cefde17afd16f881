"""The egress proxy's CONNECT over real sockets (``serve_tcp`` and ``serve_unix``): allowed
hosts are tunnelled with their bytes counted, others get a 403 with the reason."""

import os
import socket
import ssl
import stat
import subprocess
import threading

import pytest
from egress_helpers import CURL, _head, _opener, _port, _raw

from stockade.egress.proxy import Connection

pytestmark = pytest.mark.usefixtures("_no_ambient_proxy")


# --- CONNECT -----------------------------------------------------------------------------------


def test_urllib_https_through_connect(make_proxy, tls_server, cert):
    port = _port(tls_server)
    proxy, recorder = make_proxy([f"allowed.test:{port}"])
    proxy_port = proxy.serve_tcp()
    with _opener(proxy_port, cert[0]).open(f"https://allowed.test:{port}/x", timeout=5) as reply:
        assert reply.read() == b"hello from tls /x"
    seen = recorder.wait()
    assert (seen.host, seen.port, seen.allowed, seen.method) == (
        "allowed.test",
        port,
        True,
        "CONNECT",
    )
    assert seen.reason == f"allowed.test:{port} is in the profile's hosts"
    assert seen.bytes_up > 100
    assert seen.bytes_down > 100


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
def test_curl_https_through_connect(make_proxy, tls_server, cert):
    port = _port(tls_server)
    proxy, recorder = make_proxy([f"allowed.test:{port}"])
    proxy_port = proxy.serve_tcp()
    out = subprocess.run(
        [
            CURL,
            "-sS",
            "-x",
            f"http://127.0.0.1:{proxy_port}",
            "--cacert",
            cert[0],
            f"https://allowed.test:{port}/curl",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "hello from tls /curl"
    seen = recorder.wait()
    assert seen.allowed
    assert seen.method == "CONNECT"


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
def test_curl_refused_host_reports_403(make_proxy, tls_server, cert):
    proxy, recorder = make_proxy(["github.com"])
    proxy_port = proxy.serve_tcp()
    out = subprocess.run(
        [
            CURL,
            "-sS",
            "-x",
            f"http://127.0.0.1:{proxy_port}",
            "--cacert",
            cert[0],
            f"https://allowed.test:{_port(tls_server)}/",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode != 0
    assert "403" in out.stderr
    assert not recorder.wait().allowed


def test_serve_unix_connect_and_tls(make_proxy, tls_server, cert, tmp_path):
    port = _port(tls_server)
    proxy, recorder = make_proxy([f"allowed.test:{port}"])
    path = str(tmp_path / "egress.sock")
    proxy.serve_unix(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.listdir(tmp_path) == ["egress.sock"]
    context = ssl.create_default_context(cafile=cert[0])
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(path)
        sock.sendall(f"CONNECT allowed.test:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert _head(sock).startswith(b"HTTP/1.1 200 ")
        with context.wrap_socket(sock, server_hostname="allowed.test") as tls:
            tls.sendall(b"GET /unix HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
            reply = b""
            while data := tls.recv(65536):
                reply += data
    assert reply.endswith(b"hello from tls /unix")
    assert recorder.wait().allowed
    proxy.close()
    assert not os.path.exists(path)


def test_serve_unix_refuses_an_existing_path(make_proxy, tmp_path):
    proxy, _ = make_proxy(["github.com"])
    path = tmp_path / "taken"
    path.write_text("")
    with pytest.raises(FileExistsError):
        proxy.serve_unix(str(path))


def test_disallowed_host_gets_403_with_the_reason(make_proxy, echo_port):
    proxy, recorder = make_proxy(["github.com", "*.example.com"])
    proxy_port = proxy.serve_tcp()
    reply = _raw(proxy_port, b"CONNECT evil.com:443 HTTP/1.1\r\n\r\n")
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 403 Forbidden")
    assert b"text/plain" in head
    text = body.decode()
    assert "stockade" in text
    assert "evil.com:443 is not in the profile's hosts (github.com:443, *.example.com:443)" in text
    assert recorder.wait() == Connection(
        "evil.com",
        443,
        False,
        "evil.com:443 is not in the profile's hosts (github.com:443, *.example.com:443)",
        "CONNECT",
        0,
        0,
    )


def test_urllib_refused_https(make_proxy, tls_server, cert):
    proxy, _ = make_proxy(["github.com"])
    proxy_port = proxy.serve_tcp()
    with pytest.raises(OSError, match="403"):
        _opener(proxy_port, cert[0]).open(f"https://allowed.test:{_port(tls_server)}/", timeout=5)


def test_connect_relays_pipelined_bytes_and_counts_them(make_proxy, echo_port):
    proxy, recorder = make_proxy([f"allowed.test:{echo_port}"])
    proxy_port = proxy.serve_tcp()
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=5) as sock:
        sock.sendall(f"CONNECT allowed.test:{echo_port} HTTP/1.1\r\n\r\nhello\n".encode())
        assert _head(sock) == b"HTTP/1.1 200 Connection established\r\n\r\n"
        got = b""
        while len(got) < 6:
            got += sock.recv(6)
        assert got == b"hello\n"
        payload = os.urandom(3 << 20)
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        got = b""
        while len(got) < len(payload):
            got += sock.recv(1 << 20)
        sender.join()
        assert got == payload
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(10) == b""
    seen = recorder.wait()
    assert seen.bytes_up == seen.bytes_down == 6 + len(payload)
