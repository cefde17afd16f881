"""Network egress, in each sandbox: only the profile's hosts, only through the host's proxy,
only for commands classed ``network``. A live upstream on loopback makes every refusal count:
the same server answers the allowed request.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import attrs
import pytest

from stockade import hookimpl
from stockade.config.schema import Config, NetworkConfig
from stockade.request.spec import ExecRequest, Profile
from stockade.testing import self_signed_cert

from .conftest import PYTHON

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


def _tls_upstream(folder) -> tuple[subprocess.Popen[bytes], int, str]:
    """An HTTPS server in a child process, with a throwaway certificate for allowed.test."""
    cert_path, key_path = self_signed_cert(folder)
    server = (
        "import http.server, ssl, sys\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.send_header('Content-Length', '6')\n"
        "        self.end_headers(); self.wfile.write(b'secure')\n"
        "    def log_message(self, *a): pass\n"
        "s = http.server.HTTPServer(('127.0.0.1', 0), H)\n"
        "c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain(sys.argv[1], sys.argv[2])\n"
        "s.socket = c.wrap_socket(s.socket, server_side=True)\n"
        "print(s.server_address[1], flush=True); s.serve_forever()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", server, cert_path, key_path], stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    return proc, port, cert_path


def test_the_cli_fetches_https_from_an_allowed_host(box, tmp_path):
    proc, port, cert = _tls_upstream(box.ws)
    try:
        config = box.root / "stockade.toml"
        config.write_text(
            f'sandbox = "{box.sandbox}"\n'
            f'[agents.net]\nhosts = ["allowed.test:{port}"]\nask = []\nworkspace = "{box.ws}"\n'
            '[network]\nresolve = { "allowed.test" = "127.0.0.1" }\n'
        )
        env = {**os.environ, "HOME": str(box.home)}
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "from stockade.cli import entry; entry()",
                "--config",
                str(config),
                "run",
                "--agent",
                "net",
                "--",
                CURL,
                "-sS",
                "--cacert",
                cert,
                f"https://allowed.test:{port}/",
            ],
            cwd=box.ws,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    assert (done.returncode, done.stdout) == (0, "secure"), done.stderr


@pytest.mark.sandboxes("landlock")
def test_landlock_without_tcp_rules_refuses_network_commands(box, make_host, upstream):
    from stockade.config.schema import PluginsConfig
    from stockade.errors import SandboxUnavailable

    old = {"landlock": {"max_abi": 3, "accept_partial": True}}  # as a kernel before TCP rules
    config = attrs.evolve(config_for(box, upstream), plugins=PluginsConfig(settings=old))
    host = make_host(config=config)
    with pytest.raises(SandboxUnavailable, match="Landlock ABI 3 has no TCP rules"):
        host.run(curl(box, f"http://allowed.test:{upstream}/"))
    # The control: the same kernel still runs what needs no network.
    assert host.run(box.request(["true"], profile="net")).ok


def test_the_terminal_is_told_why_the_proxy_refused(box, upstream, tmp_path):
    """`stockade run` prints the proxy's refusal on stderr after the command's own output."""
    config = tmp_path / "config.toml"
    config.write_text(
        f'sandbox = "{box.sandbox}"\n'
        "[network.resolve]\n"
        '"allowed.test" = "127.0.0.1"\n"denied.test" = "127.0.0.1"\n'
        "[agents.net]\n"
        f'hosts = ["allowed.test:{upstream}"]\nask = []\nworkspace = "{box.ws}"\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "STOCKADE_DISABLE_PLUGINS"}
    env["HOME"] = str(box.home)

    def stockade(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", "from stockade.cli import entry; entry()", *argv],
            capture_output=True,
            text=True,
            env=env,
            cwd=box.ws,
            timeout=60,
            check=False,
        )

    def run(url: str) -> subprocess.CompletedProcess[str]:
        return stockade("--config", str(config), "run", "--profile", "net", "--", CURL, "-sS", url)

    denied = run(f"http://denied.test:{upstream}/")
    line = f"stockade: the egress proxy refused GET denied.test:{upstream}: "
    assert line in denied.stderr, denied.stderr
    assert "is not in the profile's hosts" in denied.stderr.split(line, 1)[1]

    def denied_reason(stderr: str) -> str:
        return stderr.split(line, 1)[1].splitlines()[0]

    allowed = run(f"http://allowed.test:{upstream}/")  # the control: nothing to tell
    assert allowed.stdout == BODY.decode() and "egress proxy refused" not in allowed.stderr
    # Plain replay shows each connection and its rule, not an empty line.
    runs = json.loads(stockade("--config", str(config), "log", "--json").stdout)
    [run_id] = [r["run_id"] for r in runs if f"http://denied.test:{upstream}/" in r["argv"]]
    lines = stockade("--config", str(config), "replay", run_id).stdout.splitlines()
    [shown] = [line for line in lines if " connection " in line]
    assert shown.endswith(f"GET denied.test:{upstream} refused: " + denied_reason(denied.stderr))
