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
The check is asked again before each read of the client's bytes goes upstream (a connection
opened while the run was clean sends nothing once it holds both), so last an upload of
16 MiB through the proxy, with the check and without, interleaved: what that costs a byte.

Last, what hiding 100 private globs costs a command (:mod:`stockade.policy.private` finds
them on disk when a step is decided; bubblewrap's masks are a few more options): on a
workspace of 20 folders of 25 files (500 files), 100 globs with a fixed folder
(``secret-N/*``, 10 of which match) and again with 10 of them starting with a wildcard
(``*.extN`` and ``**/secret*``: the whole workspace is walked), after the workspace settled
(no folder changed in the last two seconds: what a step of a warm server meets), cold
(nothing remembered, the globs never read: a process's first step with no memory file, or a
step after every folder changed), and cold with the store's memory file (a CLI call's first
step: :mod:`stockade.policy.walk`). Target: at most **0.5 ms** a command.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import tempfile
import time
from collections.abc import Callable
from typing import Any

import timing  # bench/timing.py

TARGET_MS = 0.1


def _listener() -> tuple[socket.socket, int]:
    from stockade.testing import listening

    def one(conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data and (chunk := conn.recv(4096)):
                data += chunk
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")

    server = listening(one, threaded=False)
    return server, server.getsockname()[1]


def _sink() -> tuple[socket.socket, int]:
    """A listener that reads a request's whole body (its Content-Length), then answers."""
    from stockade.testing import listening

    def one(conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            left = length - len(body)
            while left > 0 and (chunk := conn.recv(262144)):
                left -= len(chunk)
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")

    server = listening(one)
    return server, server.getsockname()[1]


UPLOAD = 16 * 1024 * 1024


def _upload(proxy_port: int, port: int) -> int:
    head = (
        f"POST http://allowed.test:{port}/ HTTP/1.1\r\nHost: allowed.test:{port}\r\n"
        f"Content-Length: {UPLOAD}\r\n\r\n"
    ).encode()
    piece = b"x" * 65536
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=30) as sock:
        sock.sendall(head)
        for _ in range(UPLOAD // len(piece)):
            sock.sendall(piece)
        while sock.recv(4096):
            pass
    return 0


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
                clean.run(ExecRequest(["echo", "words"], profile="a"))
            tainted.run(ExecRequest(["echo", "words"], profile="a"))
            tainted.run(ExecRequest(["true"], profile="a", read_private=True))  # not network
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
            sink, sink_port = _sink()
            hosts = parse_hosts([f"allowed.test:{port}", f"allowed.test:{sink_port}"])
            request = (
                f"GET http://allowed.test:{port}/ HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n"
            ).encode()
            proxies = {
                "with the check": Proxy(
                    hosts, resolve={"allowed.test": "127.0.0.1"}, check=checks["clean"]
                ),
                "without": Proxy(hosts, resolve={"allowed.test": "127.0.0.1"}),
            }
            try:
                ports = {name: proxy.serve_tcp() for name, proxy in proxies.items()}
                cases: dict[str, Callable[[], int]] = {
                    name: functools.partial(_through, p, request) for name, p in ports.items()
                }
                found["connections"] = timing.interleaved(cases, max(runs // 4, 50), warmup)
                uploads: dict[str, Callable[[], int]] = {
                    name: functools.partial(_upload, p, sink_port) for name, p in ports.items()
                }
                found["uploads"] = timing.interleaved(uploads, max(runs // 200, 10), 2)
            finally:
                for proxy in proxies.values():
                    proxy.close()
                server.close()
                sink.close()
    found["met"] = found["clean"]["median"] <= TARGET_MS
    return found


MASK_TARGET_MS = 0.5


def bench_masks(runs: int = 300) -> dict[str, Any]:
    """:func:`stockade.policy.private.find` for 100 globs, and bubblewrap's mask options."""
    from stockade.policy import walk
    from stockade.policy.private import find

    found: dict[str, Any] = {"target_ms": MASK_TARGET_MS}
    with (
        tempfile.TemporaryDirectory(prefix="stockade-bench-masks-") as ws,
        tempfile.TemporaryDirectory(prefix="stockade-bench-walks-") as walks,
    ):
        for folder in range(20):
            os.makedirs(os.path.join(ws, f"src{folder}"))
            for number in range(25):
                with open(os.path.join(ws, f"src{folder}", f"f{number}.py"), "w") as file:
                    file.write("x\n")
        for n in range(10):
            os.makedirs(os.path.join(ws, f"secret-{n}"))
            with open(os.path.join(ws, f"secret-{n}", "key"), "w") as file:
                file.write("k\n")
        fixed = tuple(f"secret-{n}/*" for n in range(100))
        wild = (*fixed[:90], *(f"*.ext{n}" for n in range(10)), "**/secret*")
        time.sleep(walk.SETTLED_NS / 1e9 + 0.1)  # a workspace not changed just now
        for label, globs in (("fixed", fixed), ("wildcards", wild)):
            assert len(find(ws, globs).paths) == 10  # the bench measures the real thing
            _calls(functools.partial(find, ws, globs), 20)
            found[label] = _calls(functools.partial(find, ws, globs), runs)
            found[f"{label}, cold"] = _calls(functools.partial(_cold, find, ws, globs), runs)
            _cold(find, ws, globs, walks)  # the store's memory file, as a first step leaves it
            kept = functools.partial(_cold, find, ws, globs, walks)
            found[f"{label}, cold, kept"] = _calls(kept, runs)
        found["bare walk"] = _calls(functools.partial(_bare_walk, ws), runs)
        try:
            from stockade_bubblewrap import layout
        except ImportError:
            return found
        paths = find(ws, fixed).paths
        cases: dict[str, Callable[[], int]] = {
            "layout, 10 masked": functools.partial(_layout, layout, ws, paths),
            "layout, none": functools.partial(_layout, layout, ws, ()),
        }
        found["layout"] = timing.interleaved(cases, runs // 3, 10)
    medians = [found[k]["median"] for k in ("fixed", "wildcards", "wildcards, cold, kept")]
    found["met"] = max(medians) <= MASK_TARGET_MS
    return found


def _cold(
    find: Callable[..., Any], ws: str, globs: tuple[str, ...], memory: str | None = None
) -> None:
    """``find`` with nothing remembered in the process, its globs never read (a process's
    first step); with ``memory``, the store's memory file read (a CLI call's first step)."""
    from stockade.policy import globs as matching
    from stockade.policy import walk

    walk.forget()
    matching.matcher.cache_clear()
    find(ws, globs, memory=memory)


def _bare_walk(folder: str) -> None:
    """The baseline: every folder of the workspace listed, nothing matched."""
    stack = [folder]
    while stack:
        with os.scandir(stack.pop()) as entries:
            stack += [e.path for e in entries if e.is_dir(follow_symlinks=False)]


def _layout(layout: Any, ws: str, private: tuple[str, ...]) -> int:  # noqa: ANN401 - the module
    layout.build(mode="workspace-write", cwd=ws, env={}, host_env=os.environ, private=private)
    return 0


def report_masks(stats: dict[str, Any]) -> None:
    """The masks' table."""
    print("\nHiding 100 private globs (500 files in the workspace)")
    print(timing.HEAD)
    print(timing.row("find: 100 globs under fixed folders", stats["fixed"]))
    print(timing.row("find: 90 of them, 11 starting with a wildcard", stats["wildcards"]))
    print(timing.row("find, cold: 100 globs under fixed folders", stats["fixed, cold"]))
    print(timing.row("find, cold: 90 and 11 with a wildcard", stats["wildcards, cold"]))
    print(timing.row("find, cold, memory file: 100 fixed", stats["fixed, cold, kept"]))
    print(timing.row("find, cold, memory file: 90 and 11", stats["wildcards, cold, kept"]))
    print(timing.row("baseline: a bare walk of the whole workspace", stats["bare walk"]))
    for name, figures in stats.get("layout", {}).items():
        print(timing.row(f"bubblewrap {name}", figures))
    verdict = "met" if stats["met"] else "NOT met"
    print(f"  target: at most {MASK_TARGET_MS} ms a command (median of find): {verdict}")


def report_check(stats: dict[str, Any]) -> None:
    """The section's table."""
    print(f"\nThe breaker's check at the egress proxy, {stats['runs']} calls each")
    print(timing.HEAD)
    print(timing.row("at_connection, a clean run (reads the record)", stats["clean"]))
    print(timing.row("at_connection, a run holding both (from memory)", stats["tainted"]))
    for name, figures in stats["connections"].items():
        print(timing.row(f"a connection through the proxy, {name}", figures))
    for name, figures in stats["uploads"].items():
        print(timing.row(f"16 MiB uploaded through the proxy, {name}", figures))
    verdict = "met" if stats["met"] else "NOT met"
    print(f"  target: the check at most {TARGET_MS} ms a connection (median): {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    stats = bench_check(args.runs)
    report_check(stats)
    masks = bench_masks(max(args.runs // 4, 100))
    report_masks(masks)
    both = {"breaker_check": stats, "breaker_masks": masks}
    print("\nBENCH " + json.dumps(both, sort_keys=True, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
