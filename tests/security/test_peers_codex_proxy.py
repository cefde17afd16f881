"""Codex's managed-proxy cases (``codex-rs/linux-sandbox/tests/suite/managed_proxy.rs``),
ported to a ``network`` command whose profile names one host.

Codex's managed-proxy mode routes a sandboxed command through a proxy named in its
environment. Stockade's host runs that proxy itself and hands the command ``HTTP_PROXY``
pointing at the in-sandbox forwarder; the rest of the network is closed. A live upstream
on loopback answers the allowed request, so each refusal is counted against a server that
does answer. Our own tests of the same cases, not their code.
"""

from __future__ import annotations

import json

import pytest

from .peers_common import (
    BODY,
    CODEX_LANDLOCK,
    PYTHON,
    NetworkPython,
    http_upstream,
    net_config,
)

CODEX_PROXY = CODEX_LANDLOCK.replace("landlock.rs", "managed_proxy.rs")
NO_ROUTE = (
    "differs: the host sets the proxy itself; a command that drops it gets no route "
    "(fails closed, no error message of its own)"
)
PEERS = {
    "test_fails_closed_without_the_proxy": (
        CODEX_PROXY,
        "managed_proxy_mode_fails_closed_without_proxy_env",
        NO_ROUTE,
        NO_ROUTE,
    ),
    "test_routes_through_the_proxy_and_blocks_direct_egress": (
        CODEX_PROXY,
        "managed_proxy_mode_routes_through_bridge_and_blocks_direct_egress",
        "pass",
        "pass",
    ),
    "test_unix_socket_creation_is_denied_to_the_command": (
        CODEX_PROXY,
        "managed_proxy_mode_denies_af_unix_creation_for_user_command",
        "pass",
        "pass",
    ),
    "test_unix_socket_denied_but_socketpair_allowed": (
        CODEX_PROXY,
        "managed_proxy_mode_denies_af_unix_socket_but_allows_socketpair",
        "pass",
        "pass",
    ),
}


@pytest.fixture
def upstream():
    with http_upstream() as port:
        yield port


@pytest.fixture
def net_host(make_host, box, upstream):
    config = net_config(box, (f"allowed.test:{upstream}",))
    return make_host(allow_all=True, config=config, plugins=[NetworkPython()])


def _script(host, box, source: str, *args: str):
    """Run ``source`` as a script file (``python -c`` is classed destroys), classed network."""
    (box.ws / "script.py").write_text(source)
    result = host.run(box.request([PYTHON, "-S", "script.py", *args], profile="net"))
    assert result.classification.kind == "network", result.classification
    assert result.exit_code == 0, result.stderr.text
    return json.loads(result.stdout.text)


RAW = """
import json, os, socket, sys
out = {}
proxy = os.environ.get("HTTP_PROXY", "")
out["proxy"] = bool(proxy)
def fetch(host, port, target):
    try:
        s = socket.create_connection((host, port), timeout=10)
        s.sendall(f"GET {target} HTTP/1.1\\r\\nHost: allowed.test:{sys.argv[1]}\\r\\n"
                  "Connection: close\\r\\n\\r\\n".encode())
        data = b""
        while chunk := s.recv(4096):
            data += chunk
        return data.decode(errors="replace")
    except OSError as e:
        return "refused " + (e.strerror or str(e))
if proxy:
    address = proxy.split("://", 1)[1].rstrip("/")
    host, port = address.rsplit(":", 1)
    out["routed"] = fetch(host, int(port), f"http://allowed.test:{sys.argv[1]}/")
out["direct"] = fetch("127.0.0.1", int(sys.argv[1]), "/")
print(json.dumps(out))
"""


# managed_proxy.rs: managed_proxy_mode_routes_through_bridge_and_blocks_direct_egress
# (an absolute-form request by hand to $HTTP_PROXY reaches the upstream; a direct connect
# to the same upstream does not)
def test_routes_through_the_proxy_and_blocks_direct_egress(net_host, box, upstream):
    out = _script(net_host, box, RAW, str(upstream))
    assert out["proxy"] and out["routed"].startswith("HTTP/1.") and BODY in out["routed"], out
    assert out["direct"].startswith("refused"), out


# managed_proxy.rs: managed_proxy_mode_fails_closed_without_proxy_env (the command drops
# the proxy from its environment: nothing else leads out)
def test_fails_closed_without_the_proxy(net_host, box, upstream):
    source = "import os\nos.environ.pop('HTTP_PROXY', None)\n" + RAW
    out = _script(net_host, box, source, str(upstream))
    assert not out["proxy"] and out["direct"].startswith("refused"), out


UNIX = """
import json, socket
out = {}
try:
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    out["socket"] = "created"
except OSError as e:
    out["socket"] = type(e).__name__
try:
    a, b = socket.socketpair()
    a.sendall(b"ping")
    out["socketpair"] = b.recv(4).decode()
except OSError as e:
    out["socketpair"] = type(e).__name__
print(json.dumps(out))
"""


# managed_proxy.rs: managed_proxy_mode_denies_af_unix_creation_for_user_command
def test_unix_socket_creation_is_denied_to_the_command(net_host, box):
    assert _script(net_host, box, UNIX)["socket"] == "PermissionError"


# managed_proxy.rs: managed_proxy_mode_denies_af_unix_socket_but_allows_socketpair
def test_unix_socket_denied_but_socketpair_allowed(net_host, box):
    out = _script(net_host, box, UNIX)
    assert out == {"socket": "PermissionError", "socketpair": "ping"}, out
