"""The proxy keeps one name per attempt: the SNI inside a tunnel, the Host of a forwarded
request, and every malformed request gets its answer and its event. Live upstreams on
loopback record what reaches them, so each refusal has its control beside it."""

import contextlib
import shutil
import socket
import ssl
import subprocess
import threading
import time

import pytest

from stockade.egress import relay as egress_relay
from stockade.egress.proxy import Proxy, parse_hosts
from stockade.egress.tls import HRR_RANDOM
from stockade.testing import self_signed_cert


def vec(width, data):
    return len(data).to_bytes(width, "big") + data


def reframe(message, sizes):
    """A handshake ``message`` cut into TLS records of the given sizes (cycled)."""
    out, at, i = b"", 0, 0
    while at < len(message):
        piece = message[at : at + sizes[i % len(sizes)]]
        out += b"\x16\x03\x01" + vec(2, piece)
        at, i = at + len(piece), i + 1
    return out


def build_hello(name=b"allowed.test", extensions=None):
    """A minimal ClientHello handshake message naming ``name`` (or carrying ``extensions``)."""
    if extensions is None:
        extensions = [(0, vec(2, b"\x00" + vec(2, name)))]
    body = b"\x03\x03" + bytes(32) + vec(1, b"") + vec(2, b"\x13\x01") + vec(1, b"\x00")
    body += vec(2, b"".join(kind.to_bytes(2, "big") + vec(2, data) for kind, data in extensions))
    return b"\x01" + len(body).to_bytes(3, "big") + body


class Recorder(list):
    """The connections a proxy reported (``on_connection=recorder.append``), in order."""

    def wait(self, count=1, timeout=10.0):
        deadline = time.monotonic() + timeout
        while len(self) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(self) >= count, self
        return self[count - 1]


@pytest.fixture
def make_proxy():
    made = []

    def make(hosts):
        recorder = Recorder()
        proxy = Proxy(
            parse_hosts(hosts),
            resolve={"allowed.test": "127.0.0.1", "other.test": "127.0.0.1"},
            on_connection=recorder.append,
        )
        made.append(proxy)
        return proxy.serve_tcp(), recorder

    yield make
    for proxy in made:
        proxy.close()


class RawUpstream:
    """A TCP listener that keeps every byte each connection sent and answers a request head
    with ``reply``; or speaks ``first`` and echoes a line; or answers its first bytes with
    ``retry`` and listens on."""

    def __init__(self, reply=b"", *, first=b"", retry=b""):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = []
        self.reply, self.first, self.retry = reply, first, retry
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        got = bytearray()
        self.received.append(got)
        with conn:
            conn.settimeout(10)
            with contextlib.suppress(OSError):
                if self.first:
                    conn.sendall(self.first)
                while data := conn.recv(65536):
                    if self.retry and not got:
                        conn.sendall(self.retry)
                    got += data
                    if self.reply and got.endswith((b"\r\n\r\n", b"abc")):
                        conn.sendall(self.reply)
                        return
                    if self.first and got.endswith(b"\n"):
                        conn.sendall(b"echo " + bytes(got))
                        return

    def close(self):
        self.sock.close()


class TlsUpstream:
    """A TLS server for allowed.test and other.test that records the SNI of each handshake."""

    def __init__(self, folder):
        cert, key = self_signed_cert(folder, ("allowed.test", "other.test"))
        self.cafile = cert
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.names = []
        self.context.sni_callback = lambda _sock, name, _ctx: self.names.append(name)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        with contextlib.suppress(OSError), conn:
            conn.settimeout(10)
            with self.context.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1024)
                tls.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nsecure")

    def close(self):
        self.sock.close()


@pytest.fixture
def tls_upstream(tmp_path):
    server = TlsUpstream(tmp_path)
    yield server
    server.close()


def open_tunnel(proxy_port, target):
    sock = socket.create_connection(("127.0.0.1", proxy_port), timeout=10)
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        data = sock.recv(1)
        assert data, head
        head += data
    assert head.startswith(b"HTTP/1.1 200"), head
    return sock


def https_get(proxy_port, port, cafile, sni, version=ssl.TLSVersion.MAXIMUM_SUPPORTED):
    context = ssl.create_default_context(cafile=cafile)
    context.check_hostname = False
    context.maximum_version = version
    with (
        open_tunnel(proxy_port, f"allowed.test:{port}") as sock,
        context.wrap_socket(sock, server_hostname=sni) as tls,
    ):
        tls.sendall(b"GET / HTTP/1.0\r\n\r\n")
        reply = b""
        with contextlib.suppress(ssl.SSLError):
            while data := tls.recv(4096):
                reply += data
        return reply


def read_all(sock):
    out = b""
    with contextlib.suppress(OSError):
        while data := sock.recv(65536):
            out += data
    return out


# --- SNI inside a tunnel -------------------------------------------------------------------------


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_the_right_sni_goes_through(make_proxy, tls_upstream, version):
    proxy_port, recorder = make_proxy([f"allowed.test:{tls_upstream.port}"])
    reply = https_get(proxy_port, tls_upstream.port, tls_upstream.cafile, "allowed.test", version)
    assert reply.endswith(b"secure")
    assert tls_upstream.names == ["allowed.test"]
    seen = recorder.wait()
    assert seen.allowed
    assert seen.bytes_up > 100


def test_another_sni_is_refused_and_never_reaches_the_upstream(make_proxy, tls_upstream):
    proxy_port, recorder = make_proxy([f"allowed.test:{tls_upstream.port}"])
    with pytest.raises(ssl.SSLError, match=r"ACCESS_DENIED|access denied"):
        https_get(proxy_port, tls_upstream.port, tls_upstream.cafile, "other.test")
    seen = recorder.wait()
    assert not seen.allowed
    assert "'other.test' (SNI)" in seen.reason
    assert "tunnel to allowed.test" in seen.reason
    assert (seen.host, seen.method, seen.bytes_up) == ("allowed.test", "CONNECT", 0)
    assert tls_upstream.names == []  # the listener never saw a ClientHello
    with pytest.raises(ssl.SSLError):  # and without SNI at all
        https_get(proxy_port, tls_upstream.port, tls_upstream.cafile, None)
    assert "no SNI" in recorder.wait(2).reason
    assert tls_upstream.names == []


def test_a_hello_split_over_records_and_segments_goes_through(make_proxy, tls_upstream):
    proxy_port, recorder = make_proxy([f"allowed.test:{tls_upstream.port}"])
    context = ssl.create_default_context(cafile=tls_upstream.cafile)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="allowed.test")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    first = outgoing.read()
    message = first[5:]  # Python's hello is one record: re-cut it into many
    pieces = reframe(message, [3, 50, 1, 200])
    with open_tunnel(proxy_port, f"allowed.test:{tls_upstream.port}") as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for at in range(0, len(pieces), 97):
            sock.sendall(pieces[at : at + 97])
            time.sleep(0.01)  # separate segments, not a timing assertion
        while True:
            with contextlib.suppress(ssl.SSLWantReadError):
                tls.do_handshake()
                break
            if out := outgoing.read():
                sock.sendall(out)
            data = sock.recv(65536)
            assert data, "the tunnel closed during the handshake"
            incoming.write(data)
        tls.write(b"GET / HTTP/1.0\r\n\r\n")
        sock.sendall(outgoing.read())
        reply = b""
        while not reply.endswith(b"secure"):
            with contextlib.suppress(ssl.SSLWantReadError):
                reply += tls.read(4096)
                continue
            data = sock.recv(65536)
            assert data, reply
            incoming.write(data)
    assert tls_upstream.names == ["allowed.test"]
    assert recorder.wait().allowed


def test_encrypted_client_hello_is_refused(make_proxy, tls_upstream):
    proxy_port, recorder = make_proxy([f"allowed.test:{tls_upstream.port}"])
    ext = [(0, vec(2, b"\x00" + vec(2, b"allowed.test"))), (0xFE0D, b"\x00\x01")]
    with open_tunnel(proxy_port, f"allowed.test:{tls_upstream.port}") as sock:
        sock.sendall(reframe(build_hello(extensions=ext), [999]))
        assert read_all(sock) == bytes((21, 3, 3, 0, 2, 2, 49))
    assert "Encrypted Client Hello" in recorder.wait().reason
    assert tls_upstream.names == []


def test_tls_records_that_are_no_hello_are_refused_on_any_port(make_proxy):
    upstream = RawUpstream()
    try:
        proxy_port, recorder = make_proxy([f"allowed.test:{upstream.port}"])
        # A warning alert first, then a hello for another name: some servers skip the alert.
        sneaky = b"\x15\x03\x01\x00\x02\x01\x00" + reframe(build_hello(b"other.test"), [999])
        with open_tunnel(proxy_port, f"allowed.test:{upstream.port}") as sock:
            sock.sendall(sneaky)
            read_all(sock)
        assert "no well-formed ClientHello" in recorder.wait().reason
        assert b"other.test" not in b"".join(upstream.received)
    finally:
        upstream.close()


def test_non_tls_to_port_443_is_refused_elsewhere_relayed(make_proxy, monkeypatch):
    upstream = RawUpstream(first=b"220 hello\r\n")  # a server that speaks first, like SMTP
    try:
        proxy_port, recorder = make_proxy([f"allowed.test:{upstream.port}"])
        with open_tunnel(proxy_port, f"allowed.test:{upstream.port}") as sock:
            assert sock.recv(100) == b"220 hello\r\n"  # heard while the proxy waits for the client
            sock.sendall(b"EHLO x\r\n")
            assert read_all(sock) == b"echo EHLO x\r\n"
        assert recorder.wait().allowed
        monkeypatch.setattr(egress_relay, "TLS_ONLY_PORTS", frozenset({upstream.port}))
        with open_tunnel(proxy_port, f"allowed.test:{upstream.port}") as sock:
            sock.recv(100)
            sock.sendall(b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
            read_all(sock)
        seen = recorder.wait(2)
        assert not seen.allowed
        assert "does not begin with TLS" in seen.reason
        assert b"other.test" not in b"".join(upstream.received)
    finally:
        upstream.close()


def test_a_silent_tunnel_times_out_with_an_event(make_proxy, tls_upstream, monkeypatch):
    monkeypatch.setattr(egress_relay, "HELLO_TIMEOUT_S", 0.3)
    proxy_port, recorder = make_proxy([f"allowed.test:{tls_upstream.port}"])
    with open_tunnel(proxy_port, f"allowed.test:{tls_upstream.port}") as sock:
        assert read_all(sock) == b""
    seen = recorder.wait()
    assert not seen.allowed
    assert "no whole first message (a TLS ClientHello, a line) in the tunnel within 0.3 s" in (
        seen.reason
    )


def test_half_a_hello_then_silence_times_out(make_proxy, tls_upstream, monkeypatch):
    monkeypatch.setattr(egress_relay, "HELLO_TIMEOUT_S", 0.3)
    proxy_port, recorder = make_proxy([f"allowed.test:{tls_upstream.port}"])
    with open_tunnel(proxy_port, f"allowed.test:{tls_upstream.port}") as sock:
        sock.sendall(reframe(build_hello(), [999])[:30])
        read_all(sock)
    assert "within 0.3 s" in recorder.wait().reason
    assert tls_upstream.names == []


# --- plain HTTP ----------------------------------------------------------------------------------

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


@pytest.fixture
def upstream():
    server = RawUpstream(OK)
    yield server
    server.close()


def ask(proxy_port, data):
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=10) as sock:
        sock.sendall(data)
        return read_all(sock)


def test_a_host_that_names_another_host_is_403(make_proxy, upstream):
    proxy_port, recorder = make_proxy([f"allowed.test:{upstream.port}"])
    target = f"allowed.test:{upstream.port}"
    good = ask(proxy_port, f"GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    assert good.endswith(b"ok")
    assert recorder.wait().allowed
    bad = ask(proxy_port, f"GET http://{target}/ HTTP/1.1\r\nHost: other.test\r\n\r\n".encode())
    assert bad.startswith(b"HTTP/1.1 403")
    assert b"the Host header names 'other.test'" in bad
    seen = recorder.wait(2)
    assert not seen.allowed
    assert f"'other.test' but the request is for {target}" in seen.reason
    assert len(upstream.received) == 1


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"GET http://[zz/ HTTP/1.1", b"malformed host '[zz'"),
        (b"GET http://allowed.test:99999/ HTTP/1.1", b"bad port"),
        (b"GET http://allowed.test/ HTTP/1.1\r\nX\xe9: 1", b"bad header name"),
        (b"GET http://allowed.test/ HTTP/1.1\r\nX: 1\r\n folded", b"folded"),
        (b"GET http://allowed.test/ HTTP/1.1\r\nX: a\0", b"NUL"),
    ],
)
def test_malformed_requests_get_400_an_event_and_no_traceback(make_proxy, capfd, line, why):
    proxy_port, recorder = make_proxy(["allowed.test:80"])
    reply = ask(proxy_port, line + b"\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 400 Bad Request")
    assert why in reply
    seen = recorder.wait()
    assert not seen.allowed
    assert why.decode("latin-1") in seen.reason
    assert "Traceback" not in capfd.readouterr().err


def test_a_bare_lf_cannot_add_a_header(make_proxy, upstream):
    proxy_port, recorder = make_proxy([f"allowed.test:{upstream.port}"])
    target = f"allowed.test:{upstream.port}"
    control = f"GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\nX-A: 1\r\n\r\n".encode()
    assert ask(proxy_port, control).endswith(b"ok")
    assert b"\r\nX-A: 1\r\n" in upstream.received[0]
    assert recorder.wait().allowed  # the control's event comes first
    smuggle = f"GET http://{target}/ HTTP/1.1\r\nX-A: 1\nHost: other.test\r\n\r\n".encode()
    reply = ask(proxy_port, smuggle)
    assert reply.startswith(b"HTTP/1.1 400")
    assert "bare CR or LF" in recorder.wait(2).reason
    assert len(upstream.received) == 1
    assert b"other.test" not in b"".join(upstream.received)


def test_a_pipelined_request_after_the_body_is_dropped(make_proxy, upstream):
    proxy_port, recorder = make_proxy([f"allowed.test:{upstream.port}"])
    target = f"allowed.test:{upstream.port}"
    first = f"POST http://{target}/a HTTP/1.1\r\nHost: {target}\r\nContent-Length: 3\r\n\r\nabc"
    second = "GET /b HTTP/1.1\r\nHost: other.test\r\n\r\n"
    assert ask(proxy_port, (first + second).encode()).endswith(b"ok")
    assert upstream.received[0].endswith(b"\r\n\r\nabc")
    assert b"other.test" not in upstream.received[0]
    assert "bytes after the request were dropped" in recorder.wait().reason


def test_a_chunked_body_is_forwarded_and_a_bad_one_refused(make_proxy, upstream):
    proxy_port, recorder = make_proxy([f"allowed.test:{upstream.port}"])
    target = f"allowed.test:{upstream.port}"
    head = f"POST http://{target}/ HTTP/1.1\r\nHost: {target}\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert ask(proxy_port, (head + "3\r\nabc\r\n0\r\n\r\n").encode()).endswith(b"ok")
    assert upstream.received[0].endswith(b"3\r\nabc\r\n0\r\n\r\n")
    assert recorder.wait().allowed
    bad = ask(proxy_port, (head + "zz\r\nabc\r\n0\r\n\r\n").encode())
    assert bad.startswith(b"HTTP/1.1 400")
    assert "chunk size" in recorder.wait(2).reason
    both = head.replace("\r\n\r\n", "\r\nContent-Length: 3\r\n\r\n") + "abc"
    assert ask(proxy_port, both.encode()).startswith(b"HTTP/1.1 400")
    assert "both Content-Length and Transfer-Encoding" in recorder.wait(3).reason


# --- a second ClientHello ------------------------------------------------------------------------

HRR_RECORD = b"\x16\x03\x03\x00\x34\x02\x00\x00\x30\x03\x03" + HRR_RANDOM + bytes(14)


@pytest.mark.parametrize(("second", "passes"), [(b"allowed.test", True), (b"other.test", False)])
def test_a_second_client_hello_must_keep_the_name(make_proxy, second, passes):
    upstream = RawUpstream(retry=HRR_RECORD)
    try:
        proxy_port, recorder = make_proxy([f"allowed.test:{upstream.port}"])
        with open_tunnel(proxy_port, f"allowed.test:{upstream.port}") as sock:
            sock.sendall(reframe(build_hello(), [999]))
            got = b""
            while len(got) < len(HRR_RECORD):
                got += sock.recv(100)
            assert got == HRR_RECORD
            sock.sendall(b"\x14\x03\x03\x00\x01\x01" + reframe(build_hello(second), [999]))
            if passes:
                sock.shutdown(socket.SHUT_WR)
            reply = read_all(sock)
        seen = recorder.wait()
        if passes:
            assert seen.allowed, seen.reason
            assert upstream.received[0].endswith(reframe(build_hello(second), [999]))
        else:
            assert reply == bytes((21, 3, 3, 0, 2, 2, 49))
            assert not seen.allowed
            assert "second ClientHello" in seen.reason
            assert "'other.test'" in seen.reason
            assert b"other.test" not in b"".join(upstream.received)
    finally:
        upstream.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl tool is not installed")
def test_a_real_hello_retry_goes_through(make_proxy, tmp_path):
    cert, key = self_signed_cert(tmp_path)
    server = subprocess.Popen(
        [
            *("openssl", "s_server", "-accept", "127.0.0.1:0", "-cert", cert, "-key", key),
            *("-groups", "P-256", "-tls1_3", "-www"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = ""
        while not line.startswith("ACCEPT"):
            line = server.stdout.readline()
            assert line, "openssl s_server did not start"
        port = int(line.rsplit(":", 1)[1])
        proxy_port, recorder = make_proxy([f"allowed.test:{port}"])
        # X25519 first: the server wants P-256 and answers with a HelloRetryRequest.
        out = subprocess.run(
            [
                *("openssl", "s_client", "-proxy", f"127.0.0.1:{proxy_port}"),
                *("-connect", f"allowed.test:{port}", "-servername", "allowed.test"),
                *("-groups", "X25519:P-256", "-tls1_3", "-msg"),
            ],
            input=b"GET / HTTP/1.0\r\n\r\n",
            capture_output=True,
            timeout=30,
            check=False,
        )
        text = out.stdout.decode(errors="replace")
        assert text.count("ClientHello") == 2, text  # the retry happened
        assert "TLSv1.3" in text
        assert out.returncode == 0, text
        assert recorder.wait().allowed
    finally:
        server.kill()
        server.wait()
        server.stdout.close()
