"""A section of the bench: what the breaker's check where bytes leave costs a connection.

    uv run python bench/breaker_check.py [--runs N]

The egress proxy of a ``network`` step asks
:meth:`~stockade.policy.breaker.Breaker.at_connection` on every connection its rules allow.
Timed here, in a host with the built-in recorder on and a store holding a few hundred events:

- ``clean``: a run that holds somebody else's words only, so each call reads the record's
  events since its last look (one query) before it lets the connection on: the common case,
  and the slow one;
- ``tainted``: a run that holds both (this process counted them): refused from memory.

Then whole connections through a :class:`~stockade.egress.proxy.Proxy` to a loopback
listener, with the check (a clean run's) and without, interleaved: the check's share of a
connection. Target: the check at most **0.1 ms** a connection (the median of the calls).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import timing  # bench/timing.py

TARGET_MS = 0.1


def _listener() -> tuple[socket.socket, int]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data and (chunk := conn.recv(4096)):
                    data += chunk
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def _through(proxy_port: int, request: bytes) -> int:
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=5) as sock:
        sock.sendall(request)
        while sock.recv(4096):
            pass
    return 0


def _calls(check: Callable[[], Any], runs: int) -> timing.Stats:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        check()
        samples.append((time.perf_counter() - start) * 1000)
    return timing.summarize(samples)


def bench_check(runs: int = 2000, warmup: int = 50) -> dict[str, Any]:
    """The check's own calls, clean and tainted; connections with and without it."""
    from stockade.config.schema import Config, StoreConfig
    from stockade.egress.proxy import Proxy, parse_hosts
    from stockade.host import Host
    from stockade.request.spec import ExecRequest, Profile

    found: dict[str, Any] = {"runs": runs, "target_ms": TARGET_MS}
    with tempfile.TemporaryDirectory(
        prefix="stockade-bench-check-", dir=os.path.expanduser("~")
    ) as scratch:
        ws = os.path.join(scratch, "ws")
        os.makedirs(os.path.join(ws, "private"))
        with open(os.path.join(ws, "private", "key"), "w") as file:
            file.write("canary\n")
        agent = Profile(name="a", workspace=ws, ask=(), private=("private/*",))
        store = StoreConfig(os.path.join(scratch, "store", "s.db"))
        config = Config(agents={"a": agent}, store=store)
        with Host(config) as clean, Host(config) as tainted:
            for _ in range(40):  # a record with some history
                clean.run(ExecRequest(["echo", "words"], mode="danger-full-access", profile="a"))
            tainted.run(ExecRequest(["echo", "words"], mode="danger-full-access", profile="a"))
            tainted.run(ExecRequest(["true", "private/key"], profile="a"))  # confined: no ask
            profile = config.profile("a")
            checks = {
                "clean": lambda: clean.breaker.at_connection(
                    clean.run_id, profile, over_breaker=False
                ),
                "tainted": lambda: tainted.breaker.at_connection(
                    tainted.run_id, profile, over_breaker=False
                ),
            }
            assert checks["clean"]() is None and checks["tainted"]() is not None
            for name, check in checks.items():
                _calls(check, warmup)
                found[name] = _calls(check, runs)
            server, port = _listener()
            request = (
                f"GET http://allowed.test:{port}/ HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n"
            ).encode()
            proxies = {
                "with the check": Proxy(
                    parse_hosts([f"allowed.test:{port}"]),
                    resolve={"allowed.test": "127.0.0.1"},
                    check=checks["clean"],
                ),
                "without": Proxy(
                    parse_hosts([f"allowed.test:{port}"]), resolve={"allowed.test": "127.0.0.1"}
                ),
            }
            try:
                ports = {name: proxy.serve_tcp() for name, proxy in proxies.items()}
                cases: dict[str, Callable[[], int]] = {
                    name: functools.partial(_through, p, request) for name, p in ports.items()
                }
                found["connections"] = timing.interleaved(cases, max(runs // 4, 50), warmup)
            finally:
                for proxy in proxies.values():
                    proxy.close()
                server.close()
    found["met"] = found["clean"]["median"] <= TARGET_MS
    return found


def report_check(stats: dict[str, Any]) -> None:
    """The section's table."""
    print(f"\nThe breaker's check at the egress proxy, {stats['runs']} calls each")
    print(timing.HEAD)
    print(timing.row("at_connection, a clean run (reads the record)", stats["clean"]))
    print(timing.row("at_connection, a run holding both (from memory)", stats["tainted"]))
    for name, figures in stats["connections"].items():
        print(timing.row(f"a connection through the proxy, {name}", figures))
    verdict = "met" if stats["met"] else "NOT met"
    print(f"  target: the check at most {TARGET_MS} ms a connection (median): {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    stats = bench_check(args.runs)
    report_check(stats)
    print("\nBENCH " + json.dumps({"breaker_check": stats}, sort_keys=True, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
