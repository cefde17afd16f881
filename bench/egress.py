"""The egress section of the bench: one large download through the proxy (``bench/run.py``).

A local upstream (a child Python process, so it does not share the proxy's GIL) serves a
256 MiB body over plain HTTP on loopback. The same client downloads it (a) directly and
(b) through :class:`stockade.egress.proxy.Proxy` with ``CONNECT`` (``curl -p -x``: a tunnel, the
path TLS traffic takes, without measuring TLS), interleaved. The client is ``curl`` where it
is installed, else a child Python process. The target: at least 500 MB/s through the proxy.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import timing  # bench/timing.py

EGRESS_TARGET_MBPS = 500.0
SIZE = 256 * 1024 * 1024


UPSTREAM = r"""
import socket, sys, threading
size = int(sys.argv[1])
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
chunk = memoryview(bytes(1 << 20))
def serve(conn):
    with conn:
        head = b""
        while b"\r\n\r\n" not in head:
            data = conn.recv(65536)
            if not data:
                return
            head += data
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size)
        left = size
        while left:
            n = min(left, len(chunk))
            conn.sendall(chunk[:n])
            left -= n
while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""

CLIENT = r"""
import socket, sys
host, port, target, tunnel = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
size = int(sys.argv[5])
sock = socket.create_connection((host, port))
def head():
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(1)
        if not data:
            sys.exit(3)
        buf += data
    return buf
if tunnel:
    sock.sendall(b"CONNECT %s HTTP/1.1\r\n\r\n" % target.encode())
    if not head().startswith(b"HTTP/1.1 200"):
        sys.exit(2)
sock.sendall(b"GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % target.encode())
head()
buf = bytearray(1 << 20)
got = 0
while n := sock.recv_into(buf):
    got += n
sys.exit(0 if got == size else 4)
"""


def _download(argv: list[str]) -> Callable[[], int]:
    def call() -> int:
        return subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=False
        ).returncode

    return call


def bench_egress(interleaved: timing.Interleave, runs: int = 5, warmup: int = 1) -> dict[str, Any]:
    """MB/s of one 256 MiB download, direct and through the proxy, and their ratio."""
    from stockade.egress.proxy import Connection, Proxy, parse_hosts

    upstream = subprocess.Popen(
        [sys.executable, "-c", UPSTREAM, str(SIZE)], stdout=subprocess.PIPE, text=True
    )
    seen: list[Connection] = []
    try:
        assert upstream.stdout is not None
        port = int(upstream.stdout.readline())
        target = f"allowed.test:{port}"
        proxy = Proxy(
            parse_hosts([target]), resolve={"allowed.test": "127.0.0.1"}, on_connection=seen.append
        )
        try:
            proxy_port = proxy.serve_tcp()
            curl = shutil.which("curl")
            if curl is not None:
                client = "curl"
                base = [curl, "-sf", "-o", "/dev/null", "--noproxy", ""]
                direct = [*base, f"http://127.0.0.1:{port}/"]
                proxied = [*base, "-p", "-x", f"http://127.0.0.1:{proxy_port}", f"http://{target}/"]
            else:
                client = "python"
                py = [sys.executable, "-c", CLIENT]
                direct = [*py, "127.0.0.1", str(port), target, "0", str(SIZE)]
                proxied = [*py, "127.0.0.1", str(proxy_port), target, "1", str(SIZE)]
            cases = interleaved(
                {"direct": _download(direct), "proxied": _download(proxied)}, runs, warmup
            )
        finally:
            proxy.close()
    finally:
        upstream.kill()
        upstream.wait()
    if not seen or any(c.bytes_down < SIZE for c in seen):
        raise SystemExit(f"bench: the proxy did not relay every download: {seen[-1:]}")

    def mbps(stats: dict[str, float]) -> float:
        return SIZE / 1e6 / (stats["median"] / 1000)

    direct_mbps, proxied_mbps = mbps(cases["direct"]), mbps(cases["proxied"])
    return {
        "runs": runs,
        "warmup": warmup,
        "client": client,
        "size_mib": SIZE >> 20,
        **cases,
        "direct_mbps": direct_mbps,
        "proxied_mbps": proxied_mbps,
        "ratio": proxied_mbps / direct_mbps,
        "target_mbps": EGRESS_TARGET_MBPS,
    }


def report_egress(
    egress: dict[str, Any], row: Callable[[str, dict[str, float]], str], head: str
) -> None:
    """Print the section (``row`` and ``head`` are bench/run.py's ``_row`` and header)."""
    print(
        f"\n7. Egress proxy, one {egress['size_mib']} MiB download with {egress['client']}, "
        f"interleaved: {egress['runs']} runs each after {egress['warmup']} warm-up"
    )
    print(head)
    print(row("direct loopback download", egress["direct"]))
    print(row("through stockade.egress.proxy.Proxy (CONNECT)", egress["proxied"]))
    ok = egress["proxied_mbps"] >= EGRESS_TARGET_MBPS
    print(
        f"  direct {egress['direct_mbps']:.0f} MB/s, proxied {egress['proxied_mbps']:.0f} MB/s "
        f"({egress['ratio']:.2f}x)   target >= {EGRESS_TARGET_MBPS:g} MB/s: "
        f"{'met' if ok else 'NOT met'}"
    )


if __name__ == "__main__":  # this section alone: uv run python bench/egress.py
    import json

    print(json.dumps(bench_egress(timing.interleaved), indent=1))
