"""What the egress proxy connects to: a name resolving to loopback or a private address is
refused, localhost and a literal address are reached only where a rule names them."""

import ipaddress
import socket

import pytest
from egress_helpers import _head, _raw

from stockade.egress.proxy import Proxy
from stockade.errors import ConfigError

pytestmark = pytest.mark.usefixtures("_no_ambient_proxy")


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
