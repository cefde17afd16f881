"""What the peers' ported cases share: live servers on loopback, a network profile, verdicts.

Each ``test_peers_*.py`` module keeps a ``PEERS`` table: test name -> (peer source file, the
peer's test name, the verdict on bubblewrap, the verdict on Landlock). A verdict is
``"pass"`` (Stockade does what the peer's test asks), ``"differs: why"`` (Stockade does
something else on purpose, and the test asserts what it does instead) or ``"gap: why"``
(a real gap, pinned with the ``gap`` marker). ``tests/test_peers_table.py`` checks that the
table in ``docs/peers.md`` lists exactly these.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from stockade import hookimpl
from stockade.config.schema import Config, NetworkConfig
from stockade.request.spec import Profile

PYTHON = "/usr/bin/python3"  # the system interpreter: visible inside every sandbox
CURL = "/usr/bin/curl"
WGET = "/usr/bin/wget"
BODY = "hello from the upstream\n"

SRT = "sandbox-runtime test/sandbox/"
SRT_INTEGRATION = SRT + "integration.test.ts"
SRT_DENY = SRT + "mandatory-deny-paths.test.ts"
SRT_SECCOMP = SRT + "seccomp-filter.test.ts"
CODEX_LANDLOCK = "codex codex-rs/linux-sandbox/tests/suite/landlock.rs"
CODEX_EXEC = "codex codex-rs/core/tests/suite/exec.rs"
CODEX_SEATBELT = "codex codex-rs/core/tests/suite/seatbelt.rs"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY.encode())

    def log_message(self, *_args: object) -> None:
        pass


@contextmanager
def http_upstream() -> Iterator[int]:
    """A plain HTTP server on 127.0.0.1 answering ``BODY``; yields its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def net_config(box, hosts: tuple[str, ...], names: tuple[str, ...] = ()) -> Config:
    """A ``net`` agent allowed ``hosts``; each of ``names`` resolves to 127.0.0.1."""
    agent = Profile(name="net", hosts=hosts, ask=(), workspace=str(box.ws))
    resolve = dict.fromkeys(("allowed.test", "denied.test", *names), "127.0.0.1")
    return Config(
        sandbox=box.sandbox, agents={"net": agent}, network=NetworkConfig(resolve=resolve)
    )


class NetworkPython:
    """Classes ``python`` as ``network`` (the built-in table knows curl, not a script)."""

    @hookimpl
    def stockade_classifier_rules(self):  # type: ignore[no-untyped-def]
        return {"python": lambda args: ("network", "the test's script talks to a host")}
