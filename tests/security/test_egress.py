"""The kit's egress attacks (:mod:`stockade.conformance.suite.test_egress`), and egress as
the command line and the Landlock provider show it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import attrs
import pytest

from stockade.conformance.suite.test_egress import *  # noqa: F403
from stockade.conformance.suite.test_egress import BODY, CURL, config_for, curl
from stockade.testing import self_signed_cert


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
