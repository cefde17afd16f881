"""Network egress, in each sandbox: only the profile's hosts, only through the host's proxy,
only for commands classed ``network``. A live upstream on loopback makes every refusal count:
the same server answers the allowed request.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import attrs
import pytest

from stockade import hookimpl
from stockade.config.schema import Config, NetworkConfig
from stockade.confine.promises import Promise
from stockade.conformance.ground import PYTHON
from stockade.request.spec import ExecRequest, Profile

CURL = "/usr/bin/curl"
BODY = b"hello from the upstream\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def config_for(box, port: int, **profile: object) -> Config:
    agent = Profile(
        name="net", hosts=(f"allowed.test:{port}",), ask=(), workspace=str(box.ws), **profile
    )  # type: ignore[arg-type]
    return Config(
        sandbox=box.sandbox,
        agents={"net": agent},
        network=NetworkConfig(resolve={"allowed.test": "127.0.0.1", "denied.test": "127.0.0.1"}),
    )


def curl(box, *args: str, **kw: object) -> ExecRequest:
    return box.request([CURL, "-sS", "--max-time", "20", *args], profile="net", **kw)


class Fetcher:
    """Classes a Python script that fetches as ``network`` (the table knows curl, not it)."""

    @hookimpl
    def stockade_classifier_rules(self):
        return {"python": lambda args: ("network", "the test's fetch script talks to a host")}


FETCH = """
import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode(), end="")
except Exception as error:
    print("FAILED", error)
"""

DIRECT = """
import socket, sys
port = int(sys.argv[1])
for kind, name in ((socket.SOCK_STREAM, "tcp"), (socket.SOCK_DGRAM, "udp")):
    try:
        s = socket.socket(socket.AF_INET, kind)
        s.settimeout(5)
        s.connect(("127.0.0.1", port))
        s.send(b"GET / HTTP/1.0\\r\\n\\r\\n")
        print(name, "REACHED", s.recv(100))
    except OSError as error:
        print(name, "refused", error.errno)
"""


@pytest.mark.promise(Promise.EGRESS_PROXY)
def test_an_allowed_host_is_reached_through_the_proxy_only(box, make_host, event_log, upstream):
    host = make_host(config=config_for(box, upstream), plugins=[event_log])
    ok = host.run(curl(box, f"http://allowed.test:{upstream}/"))
    assert (ok.exit_code, ok.stdout.text) == (0, BODY.decode()), ok.stderr.text
    assert ok.classification.kind == "network"
    # The same server, named by a host the profile lacks: 403 with the rule.
    denied = host.run(curl(box, f"http://denied.test:{upstream}/"))
    assert "stockade" in denied.stdout.text
    assert "is not in the profile's hosts" in denied.stdout.text
    assert BODY.decode() not in denied.stdout.text
    # The result says so too, for the terminal (`stockade run` prints it on stderr).
    assert ok.refused == ()
    [refusal] = denied.refused
    assert (refusal.host, refusal.port, refusal.method) == ("denied.test", upstream, "GET")
    assert "is not in the profile's hosts" in refusal.reason
    # Localhost, not named: refused as well.
    local = host.run(curl(box, f"http://localhost:{upstream}/"))
    assert "not in the profile's hosts" in local.stdout.text
    # Around the proxy, straight to the server: nothing answers.
    around = host.run(curl(box, "--noproxy", "*", f"http://127.0.0.1:{upstream}/"))
    assert around.exit_code != 0 and BODY.decode() not in around.stdout.text
    connections = [e for e in event_log.events if e.kind == "connection"]
    assert [(c.host, c.port, c.allowed) for c in connections] == [
        ("allowed.test", upstream, True),
        ("denied.test", upstream, False),
        ("localhost", upstream, False),
    ]
    assert connections[0].bytes_down > len(BODY)
    assert connections[0].action_id == ok.action_id


@pytest.mark.promise(Promise.EGRESS_PROXY)
def test_python_urllib_goes_through_and_direct_sockets_fail(box, make_host, upstream):
    host = make_host(config=config_for(box, upstream), plugins=[Fetcher()])
    script = box.ws / "fetch.py"
    script.write_text(FETCH)
    fetched = host.run(
        box.request([PYTHON, "-S", str(script), f"http://allowed.test:{upstream}/"], profile="net")
    )
    assert fetched.stdout.text == BODY.decode(), fetched.stdout.text + fetched.stderr.text
    direct = box.ws / "direct.py"
    direct.write_text(DIRECT)
    tried = host.run(box.request([PYTHON, "-S", str(direct), str(upstream)], profile="net"))
    assert "REACHED" not in tried.stdout.text, tried.stdout.text
    assert tried.stdout.text.count("refused") == 2, tried.stdout.text


@pytest.mark.promise(Promise.EGRESS_PROXY)
def test_a_command_not_classed_network_gets_no_network_at_all(box, make_host, upstream):
    host = make_host(config=config_for(box, upstream))
    direct = box.ws / "direct.py"
    direct.write_text(DIRECT)
    # `python script` is classed writes: no proxy, and no inet socket at all.
    tried = host.run(box.request([PYTHON, "-S", str(direct), str(upstream)], profile="net"))
    assert tried.classification.kind == "writes"
    assert "REACHED" not in tried.stdout.text
    assert tried.stdout.text.count("refused") == 2
    assert "HTTP_PROXY" not in tried.stdout.text
    env = host.run(box.request(["env"], profile="net"))
    assert "HTTP_PROXY" not in env.stdout.text
    # And a network command whose profile names no hosts gets none either.
    bare = attrs.evolve(
        config_for(box, upstream),
        agents={"net": Profile(name="net", ask=(), workspace=str(box.ws))},
    )
    none = make_host(config=bare).run(curl(box, f"http://allowed.test:{upstream}/"))
    assert none.exit_code != 0 and BODY.decode() not in none.stdout.text
