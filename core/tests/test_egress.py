"""The egress proxy: the hosts policy, and real sockets through serve_tcp and serve_unix."""

import contextlib
import ipaddress
import os
import shutil
import socket
import ssl
import stat
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from stockade.egress import proxy as egress
from stockade.egress.proxy import Connection, Proxy, Rule, decide, parse_hosts
from stockade.errors import ConfigError
from stockade.testing import listening, self_signed_cert

CURL = shutil.which("curl")

# --- parse_hosts -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "rule"),
    [
        ("github.com", Rule("github.com", 443, False)),
        ("GitHub.COM", Rule("github.com", 443, False)),
        ("github.com.", Rule("github.com", 443, False)),
        ("pypi.org:8443", Rule("pypi.org", 8443, False)),
        ("*.example.com", Rule("example.com", 443, True)),
        ("*.Example.com:8080", Rule("example.com", 8080, True)),
        ("127.0.0.1:8080", Rule("127.0.0.1", 8080, False)),
        ("10.0.0.1", Rule("10.0.0.1", 443, False)),
        ("[::1]:80", Rule("::1", 80, False)),
        ("[::1]", Rule("::1", 443, False)),
        ("localhost:8000", Rule("localhost", 8000, False)),
        ("files.pythonhosted.org", Rule("files.pythonhosted.org", 443, False)),
        (" _acme.example.com ", Rule("_acme.example.com", 443, False)),
    ],
)
def test_parse_hosts_accepts(entry, rule):
    assert parse_hosts([entry]) == (rule,)


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("*", "allows everything"),
        ("*.com", "bare top-level domain"),
        ("*.io", "bare top-level domain"),
        ("com", "bare top-level domain"),
        ("*.localhost", "bare top-level domain"),
        ("", "empty"),
        ("   ", "empty"),
        ("github.com:0", "port"),
        ("github.com:65536", "port"),
        ("github.com:https", "port"),
        ("github.com:", "port"),
        ("foo.*.com", "wildcard"),
        ("*example.com", "wildcard"),
        ("example.*", "wildcard"),
        ("**.example.com", "wildcard"),
        ("https://github.com", "not a URL"),
        ("github.com/org/repo", "not a URL"),
        ("user@github.com", "not a URL"),
        ("::1", "brackets"),
        ("[github.com]:443", "IPv6"),
        ("[::1", "unclosed"),
        ("-bad.example.com", "valid host name"),
        ("exa..mple.com", "valid host name"),
        ("1.2.3", "valid host name"),
        ("bücher.de", "valid host name"),
    ],
)
def test_parse_hosts_refuses(entry, why):
    with pytest.raises(ConfigError) as info:
        parse_hosts(["github.com", entry])
    assert repr(entry) in info.value.message
    assert why in info.value.message


def test_parse_hosts_keeps_order_and_drops_duplicates():
    rules = parse_hosts(["b.example.com", "a.example.com", "B.example.com"])
    assert [r.host for r in rules] == ["b.example.com", "a.example.com"]


def test_parse_hosts_refuses_a_bare_string():
    with pytest.raises(ConfigError):
        parse_hosts("github.com")


# --- decide ------------------------------------------------------------------------------------

RULES = parse_hosts(["github.com", "*.example.com", "pypi.org:8443", "127.0.0.1:8080", "[::1]:80"])


@pytest.mark.parametrize(
    ("host", "port", "allowed"),
    [
        ("github.com", 443, True),
        ("GITHUB.com", 443, True),
        ("github.com.", 443, True),
        ("github.com", 80, False),
        ("api.github.com", 443, False),
        ("a.example.com", 443, True),
        ("a.b.Example.COM.", 443, True),
        ("example.com", 443, False),
        (".example.com", 443, False),
        ("badexample.com", 443, False),
        ("example.com.evil.net", 443, False),
        ("a.example.com", 8443, False),
        ("pypi.org", 8443, True),
        ("pypi.org", 443, False),
        ("127.0.0.1", 8080, True),
        ("127.0.0.1", 443, False),
        ("[::1]", 80, True),
        ("::1", 80, True),
        ("0:0::1", 80, True),
        ("evil.com", 443, False),
    ],
)
def test_decide(host, port, allowed):
    assert decide(RULES, host, port)[0] is allowed


def test_decide_reasons_name_the_rule():
    assert decide(RULES, "github.com", 443) == (True, "github.com:443 is in the profile's hosts")
    ok, why = decide(RULES, "a.example.com", 443)
    assert ok
    assert "*.example.com:443" in why
    ok, why = decide(RULES, "evil.com", 443)
    assert not ok
    assert why == (
        "evil.com:443 is not in the profile's hosts (github.com:443, *.example.com:443, "
        "pypi.org:8443, 127.0.0.1:8080, [::1]:80)"
    )
    assert decide((), "github.com", 443) == (
        False,
        "github.com:443 is not reachable: the profile names no hosts",
    )


def test_decide_lists_a_few_rules_only():
    many = parse_hosts([f"h{i}.example.com" for i in range(20)])
    why = decide(many, "x.org", 443)[1]
    assert "h7.example.com:443" in why
    assert "h8.example.com" not in why
    assert "and 12 more" in why


# --- upstream servers --------------------------------------------------------------------------


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


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return self_signed_cert(tmp_path_factory.mktemp("tls"), ("allowed.test", "sub.allowed.test"))


@pytest.fixture(scope="module")
def tls_server(cert):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*cert)
    server = _http_server("tls", context)
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def http_server():
    server = _http_server("http")
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def echo_port():

    def echo(conn):
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    listener = listening(echo)
    yield listener.getsockname()[1]
    listener.close()


@pytest.fixture(autouse=True)
def _no_ambient_proxy(monkeypatch):
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


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


@pytest.fixture
def make_proxy():
    made = []

    def make(hosts, resolve=None, **kwargs):
        recorder = Recorder()
        resolve = {"allowed.test": "127.0.0.1"} if resolve is None else resolve
        proxy = Proxy(parse_hosts(hosts), resolve=resolve, on_connection=recorder, **kwargs)
        made.append(proxy)
        return proxy, recorder

    yield make
    for proxy in made:
        proxy.close()


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


# --- addresses ---------------------------------------------------------------------------------


def _loopback_alias():
    """A name other than localhost that the system resolves to loopback, or localhost."""
    candidates = [socket.gethostname()]
    with open("/etc/hosts") as hosts:
        for line in hosts:
            candidates += line.split("#")[0].split()[1:]
    for name in candidates:
        if name.lower().startswith("localhost"):
            continue
        try:
            infos = socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)
        except OSError:
            continue
        if infos and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos):
            return name
    return "localhost"


def test_real_dns_to_loopback_is_refused(make_proxy, echo_port, monkeypatch):
    # Every rule but localhost names a dotted name, and the loopback aliases a system has
    # (its hostname, /etc/hosts) are often undotted: so the rule's name is resolved by the
    # system resolver as such an alias, for real.
    real = socket.getaddrinfo
    alias = _loopback_alias()

    def fake(host, *args, **kwargs):
        return real(alias if host == "svc.internal.example" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    proxy, recorder = make_proxy([f"svc.internal.example:{echo_port}"], resolve={})
    reply = _raw(
        proxy.serve_tcp(), f"CONNECT svc.internal.example:{echo_port} HTTP/1.1\r\n\r\n".encode()
    )
    assert reply.startswith(b"HTTP/1.1 403")
    body = reply.decode()
    assert "resolves to 127." in body
    assert "(loopback)" in body
    assert "stockade" in body
    seen = recorder.wait()
    assert not seen.allowed
    assert "loopback" in seen.reason


PRIVATE = ["10.1.2.3", "169.254.169.254", "192.168.1.1", "0.0.0.0", "100.64.0.1"]  # noqa: S104


@pytest.mark.parametrize("address", PRIVATE)
def test_a_wildcard_never_allows_a_private_address(make_proxy, monkeypatch, address):
    def fake(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    proxy, _ = make_proxy(["*.example.com"], resolve={})
    reply = _raw(proxy.serve_tcp(), b"CONNECT metadata.example.com:443 HTTP/1.1\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 403")
    assert f"resolves to {address}".encode() in reply


def test_localhost_named_is_reachable(make_proxy, echo_port):
    proxy, recorder = make_proxy([f"localhost:{echo_port}"], resolve={})
    with socket.create_connection(("127.0.0.1", proxy.serve_tcp()), timeout=5) as sock:
        sock.sendall(f"CONNECT localhost:{echo_port} HTTP/1.1\r\n\r\nping\n".encode())
        assert _head(sock).startswith(b"HTTP/1.1 200")
        assert sock.recv(5) == b"ping\n"
    assert recorder.wait().allowed


def test_a_literal_ip_named_is_reachable(make_proxy, echo_port):
    proxy, _ = make_proxy([f"127.0.0.1:{echo_port}"], resolve={})
    with socket.create_connection(("127.0.0.1", proxy.serve_tcp()), timeout=5) as sock:
        sock.sendall(f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\n\r\nping\n".encode())
        assert _head(sock).startswith(b"HTTP/1.1 200")
        assert sock.recv(5) == b"ping\n"
    # ...but not another port on the same address
    reply = _raw(proxy.serve_tcp(), b"CONNECT 127.0.0.1:22 HTTP/1.1\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 403")


def test_resolve_map_must_hold_addresses():
    with pytest.raises(ConfigError):
        Proxy((), resolve={"allowed.test": "not-an-ip"})


# --- plain HTTP forward ------------------------------------------------------------------------


def test_plain_http_forward(make_proxy, http_server):
    port = _port(http_server)
    proxy, recorder = make_proxy([f"allowed.test:{port}"])
    proxy_port = proxy.serve_tcp()
    request = urllib.request.Request(
        f"http://allowed.test:{port}/p?q=1",
        headers={"Proxy-Authorization": "Basic c2VjcmV0", "X-Keep": "yes"},
    )
    with _opener(proxy_port).open(request, timeout=5) as reply:
        assert reply.read() == b"hello from http /p?q=1"
    path, headers = http_server.RequestHandlerClass.seen[-1]
    assert path == "/p?q=1"
    lowered = {k.lower(): v for k, v in headers.items()}
    assert lowered["connection"] == "close"
    assert lowered["host"] == f"allowed.test:{port}"
    assert lowered["x-keep"] == "yes"
    assert not any(k.startswith("proxy-") for k in lowered)
    seen = recorder.wait()
    assert (seen.host, seen.port, seen.allowed, seen.method) == ("allowed.test", port, True, "GET")
    assert seen.bytes_down > len(b"hello from http /p?q=1")


def test_plain_http_default_port_and_refusal(make_proxy):
    proxy, recorder = make_proxy(["allowed.test:8443"])
    reply = _raw(proxy.serve_tcp(), b"GET http://allowed.test/x HTTP/1.1\r\nHost: a\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 403")
    assert b"allowed.test:80 is not in the profile's hosts" in reply
    seen = recorder.wait()
    assert (seen.port, seen.method, seen.allowed) == (80, "GET", False)


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
def test_curl_plain_http_forward(make_proxy, http_server):
    port = _port(http_server)
    proxy, _ = make_proxy([f"allowed.test:{port}"])
    out = subprocess.run(
        [
            CURL,
            "-sS",
            "-x",
            f"http://127.0.0.1:{proxy.serve_tcp()}",
            f"http://allowed.test:{port}/c",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "hello from http /c"


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
