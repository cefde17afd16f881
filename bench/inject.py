"""The credential-injection section of the bench: what terminating TLS to inject costs.

One local HTTPS upstream (a child process, with a certificate for ``bound.test`` and
``plain.test``) answers a small JSON body. One egress proxy serves both names: it injects a
credential for ``bound.test`` (it terminates the client's TLS with a leaf from its run
authority, opens its own verified TLS upstream, puts the secret in the header, masks the
answer) and keeps a plain CONNECT tunnel for ``plain.test``, the path every other host
takes. A client child process makes the requests, so neither it nor the upstream shares the
proxy's GIL; each timed call is one round trip to it. Cases, interleaved:

- a fresh connection: CONNECT, TLS handshake, one GET, close (one ``curl`` or ``gh`` call);
- a request on a kept-alive connection (the second and later calls of one client).

The target: at most 5 ms added per request through the injecting tunnel, against the plain
tunnel measured in the same run. ``uv run python bench/inject.py``.

Then the response mask alone over 4 MiB of a JSON answer, in 256 KiB reads, interleaved: the
forms of :func:`~stockade.record.redact.secret_forms` only (the baseline), with the
encodings (percent, hex, wrapped base64), and with the pieces too: what a large download
from a bound host pays for each.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import timing  # bench/timing.py

INJECT_TARGET_MS = 5.0
SECRET = "ghp_" + "b3nchS3cret" * 3

UPSTREAM = r"""
import http.server, socket, ssl, sys
cert, key = sys.argv[1], sys.argv[2]
body = b'{"ok": true, "items": [1, 2, 3]}' * 8
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
server = Server(("127.0.0.1", 0), Handler)
# Small writes (TLS session tickets, then a head and a body) go at once, no Nagle wait;
# accepted sockets inherit it.
server.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"""

CLIENT = r"""
import http.client, socket, ssl, sys
_connect = socket.create_connection
def connect_nodelay(*args, **kwargs):  # as curl does: no Nagle wait on small writes
    sock = _connect(*args, **kwargs)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock
proxy_port, up_port, cafile, auth = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
context = ssl.create_default_context(cafile=cafile)
kept = {}
def connect(name):
    conn = http.client.HTTPSConnection("127.0.0.1", proxy_port, context=context, timeout=10)
    conn._create_connection = connect_nodelay
    conn.set_tunnel(name, up_port)
    return conn
def get(conn):
    conn.request("GET", "/", headers={"Authorization": auth})
    response = conn.getresponse()
    response.read()
    return response.status
for line in sys.stdin:
    kind, name = line.split()
    if kind == "fresh":
        conn = connect(name)
        status = get(conn)
        conn.close()
    else:
        if name not in kept:
            kept[name] = connect(name)
        status = get(kept[name])
    print(status, flush=True)
"""


def _call(client: subprocess.Popen[str], line: str) -> Callable[[], int]:
    def call() -> int:
        assert client.stdin is not None and client.stdout is not None
        client.stdin.write(line + "\n")
        client.stdin.flush()
        return 0 if client.stdout.readline().strip() == "200" else 1

    return call


def bench_inject(
    interleaved: timing.Interleave, runs: int = 200, warmup: int = 10
) -> dict[str, Any]:
    """Milliseconds per request through the injecting tunnel and a plain one, and the
    difference."""
    from stockade.egress.command import CommandProxy
    from stockade.egress.inject import Injection, placeholder
    from stockade.egress.proxy import Connection
    from stockade.request.spec import CredentialBinding
    from stockade.testing import self_signed_cert

    folder = Path(tempfile.mkdtemp(prefix="stockade-bench-inject-"))
    cert, key = self_signed_cert(folder, ("bound.test", "plain.test"))
    upstream = subprocess.Popen(
        [sys.executable, "-c", UPSTREAM, cert, key], stdout=subprocess.PIPE, text=True
    )
    seen: list[Connection] = []
    client = None
    try:
        assert upstream.stdout is not None
        port = int(upstream.stdout.readline())
        bound, plain = f"bound.test:{port}", f"plain.test:{port}"
        stand_in = placeholder(SECRET)
        injection = Injection.make("GH_TOKEN", "github", CredentialBinding(bound), SECRET, stand_in)
        proxy = CommandProxy(
            (bound, plain),
            dict.fromkeys(("bound.test", "plain.test"), "127.0.0.1"),
            seen.append,
            injections=[injection],
            upstream_ca=cert,
        )
        try:
            assert proxy.ca_bundle is not None
            trust = folder / "trust.pem"
            trust.write_text(Path(proxy.ca_bundle).read_text() + Path(cert).read_text())
            argv = [sys.executable, "-c", CLIENT, str(proxy.port), str(port), str(trust)]
            client = subprocess.Popen(
                [*argv, f"Bearer {stand_in}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            cases = interleaved(
                {
                    "fresh plain": _call(client, "fresh plain.test"),
                    "fresh injected": _call(client, "fresh bound.test"),
                    "kept plain": _call(client, "kept plain.test"),
                    "kept injected": _call(client, "kept bound.test"),
                },
                runs,
                warmup,
            )
        finally:
            if client is not None:
                client.kill()
                client.wait()
            proxy.close()
    finally:
        upstream.kill()
        upstream.wait()
    injected = [c for c in seen if c.host == "bound.test"]
    if not injected or not all("credential 'github' put into" in c.reason for c in injected):
        raise SystemExit(f"bench: the proxy did not inject: {injected[-1:]}")
    fresh = cases["fresh injected"]["median"] - cases["fresh plain"]["median"]
    kept = cases["kept injected"]["median"] - cases["kept plain"]["median"]
    return {
        "runs": runs,
        "warmup": warmup,
        **cases,
        "added_fresh_ms": fresh,
        "added_kept_ms": kept,
        "target_ms": INJECT_TARGET_MS,
    }


def report_inject(
    stats: dict[str, Any], row: Callable[[str, timing.Stats], str], head: str
) -> None:
    """Print the section (``row`` and ``head`` are bench/timing.py's)."""
    print(
        f"\nCredential injection, one HTTPS request through the proxy, interleaved: "
        f"{stats['runs']} runs each after {stats['warmup']} warm-up"
    )
    print(head)
    for name in ("fresh plain", "fresh injected", "kept plain", "kept injected"):
        print(
            row(f"{name} (a {'new' if 'fresh' in name else 'kept-alive'} connection)", stats[name])
        )
    ok = max(stats["added_fresh_ms"], stats["added_kept_ms"]) <= INJECT_TARGET_MS
    print(
        f"  added by injecting: {stats['added_fresh_ms']:.2f} ms on a new connection, "
        f"{stats['added_kept_ms']:.2f} ms on a kept one   target <= {INJECT_TARGET_MS:g} ms: "
        f"{'met' if ok else 'NOT met'}"
    )


MASKED = 4 * 1024 * 1024


def bench_mask(runs: int = 10, warmup: int = 1) -> dict[str, timing.Stats]:
    """Milliseconds to mask :data:`MASKED` bytes of JSON, by what the mask looks for."""
    from stockade.egress.echoes import Pieces, encodings
    from stockade.egress.stream import Mask
    from stockade.record.redact import secret_forms

    forms = [f.encode() for f in secret_forms(SECRET)]
    line = b'{"sha": "3f1c9a0d2b7e", "name": "a file of the release", "size": 12345},\n'
    data = (line * (MASKED // len(line) + 1))[:MASKED]
    reads = [data[i : i + 256 * 1024] for i in range(0, MASKED, 256 * 1024)]

    def feed(make: Callable[[], Mask]) -> Callable[[], int]:
        def call() -> int:
            mask = make()
            for read in reads:
                mask.feed(read)
            mask.flush()
            return 0

        return call

    return timing.interleaved(
        {
            "forms only": feed(lambda: Mask(forms)),
            "with encodings": feed(lambda: Mask(forms, encodings(SECRET))),
            "with encodings and pieces": feed(
                lambda: Mask(forms, encodings(SECRET), Pieces([SECRET]))
            ),
        },
        runs,
        warmup,
    )


def report_mask(stats: dict[str, timing.Stats]) -> None:
    """Print the mask's rows, with MB/s."""
    print(f"\nThe response mask over {MASKED // 2**20} MiB of JSON, 256 KiB reads")
    print(timing.HEAD)
    for name, figures in stats.items():
        rate = MASKED / 1e6 / (figures["median"] / 1000)
        print(timing.row(f"{name} ({rate:.0f} MB/s)", figures))


if __name__ == "__main__":  # this section alone: uv run python bench/inject.py
    report_inject(bench_inject(timing.interleaved), timing.row, timing.HEAD)
    report_mask(bench_mask())
