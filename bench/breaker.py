"""A section of the bench: what the breaker's taint tracking adds to ``Host.run``.

    uv run python bench/breaker.py [--runs N]

Two hosts built alike (an agent with a workspace and ``private = ["private/*"]``, the
built-in recorder on), in the same process, interleaved: one tracks taint as every host
does; in the other, ``host.breaker`` is replaced by :class:`Untracked`, which counts
nothing, records nothing and never asks. Two commands, each in both hosts:

- ``true`` in ``danger-full-access`` (the library headline of ``bench/run.py``): an
  unconfined step can reach the network, so the breaker reads the run's taints back from the
  record at every step (one indexed query);
- ``cat readme.txt`` in the strongest sandbox here: it names a file that exists, so the
  sidecar is asked about it (one indexed query), and its output taints the run once.

Neither run ever holds private data, so the breaker never asks: what is timed is the
tracking alone. The difference of the medians is what tracking adds; it is printed beside
the run-to-run spread (p90 - median) of the untracked case, the noise it must stand out of,
and beside the mean time the breaker's own calls take a step, timed inside the tracked host
(its warm-up steps included).
No target beyond the issue's "nothing measurable".
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import timing  # bench/timing.py


class Untracked:
    """A breaker that tracks nothing: the baseline (bench only)."""

    def admit(self, *_args: object) -> None:
        """Nothing counted, never an ask."""

    def private(self, spec: Any, _agent: object) -> Any:  # noqa: ANN401
        """Nothing hidden."""
        return spec

    def at_connection(self, *_args: object, **_kw: object) -> None:
        """Every connection let on."""

    def finish(self, _spec: object, carried: Any, record: Callable[[Any], Any]) -> Any:  # noqa: ANN401
        """Only the record of the result."""
        return record(carried)


class Timed:
    """A tracking breaker with a stopwatch on its own calls (the result's record excluded)."""

    def __init__(self, inner: Any) -> None:  # noqa: ANN401 - a stockade.policy.breaker.Breaker
        self.inner = inner
        self.calls = 0
        self.seconds = 0.0

    def admit(self, *args: Any) -> Any:  # noqa: ANN401
        """The breaker's admit, timed."""
        start = time.perf_counter()
        try:
            return self.inner.admit(*args)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1

    def private(self, *args: Any) -> Any:  # noqa: ANN401
        """The breaker's private paths found for a step, timed."""
        start = time.perf_counter()
        try:
            return self.inner.private(*args)
        finally:
            self.seconds += time.perf_counter() - start

    def at_connection(self, *args: Any, **kw: Any) -> Any:  # noqa: ANN401
        """The breaker's check at the proxy."""
        return self.inner.at_connection(*args, **kw)

    def finish(self, spec: object, carried: Any, record: Callable[[Any], Any]) -> Any:  # noqa: ANN401
        """The breaker's finish, timed without the time ``record`` takes."""
        spent = 0.0

        def timed_record(value: Any) -> Any:  # noqa: ANN401
            nonlocal spent
            began = time.perf_counter()
            try:
                return record(value)
            finally:
                spent += time.perf_counter() - began

        start = time.perf_counter()
        try:
            return self.inner.finish(spec, carried, timed_record)
        finally:
            self.seconds += time.perf_counter() - start - spent

    def holds(self) -> Any:  # noqa: ANN401
        """The wrapped breaker's taints."""
        return self.inner.holds()


def bench_breaker(runs: int = 200, warmup: int = 20) -> dict[str, Any]:
    """Host.run with and without taint tracking, interleaved, for both commands."""
    from stockade.config.schema import Config, StoreConfig
    from stockade.host import Host
    from stockade.request.spec import ExecRequest, Profile

    with tempfile.TemporaryDirectory(
        prefix="stockade-bench-breaker-", dir=os.path.expanduser("~")
    ) as scratch:
        ws = os.path.join(scratch, "ws")
        os.makedirs(os.path.join(ws, "private"))
        with open(os.path.join(ws, "readme.txt"), "w") as file:
            file.write("somebody else's words\n")
        agent = Profile(name="a", workspace=ws, ask=(), private=("private/*",))
        hosts = {}
        for name in ("tracked", "untracked"):
            store = StoreConfig(os.path.join(scratch, name, "store.db"))
            hosts[name] = Host(Config(agents={"a": agent}, store=store))
        hosts["untracked"].breaker = Untracked()  # type: ignore[assignment]
        stopwatch = Timed(hosts["tracked"].breaker)
        hosts["tracked"].breaker = stopwatch  # type: ignore[assignment]
        requests = {
            "full": ExecRequest(["true"], mode="danger-full-access", profile="a"),
            "confined": ExecRequest(["cat", "readme.txt"], mode="workspace-write", profile="a"),
        }

        def case(host: Host, request: ExecRequest) -> Callable[[], int]:
            def run() -> int:
                code = host.run(request).exit_code
                return code if code is not None else -1

            return run

        found: dict[str, Any] = {"runs": runs, "warmup": warmup}
        try:
            for label, request in requests.items():
                count = runs if label == "full" else max(runs // 4, 20)
                calls, seconds = stopwatch.calls, stopwatch.seconds
                stats = timing.interleaved(
                    {name: case(host, request) for name, host in hosts.items()}, count, warmup
                )
                tracked, untracked = stats["tracked"], stats["untracked"]
                own_ms = (stopwatch.seconds - seconds) / (stopwatch.calls - calls) * 1000
                found[label] = {
                    **stats,
                    "added_ms": tracked["median"] - untracked["median"],
                    "ratio": tracked["median"] / untracked["median"],
                    "spread_ms": untracked["p90"] - untracked["median"],
                    "breaker_ms": own_ms,
                }
            found["provider"] = hosts["tracked"].run(requests["confined"]).sandbox.provider
            found["taints"] = len(hosts["tracked"].breaker.holds()[1])
        finally:
            for host in hosts.values():
                host.close()
    return found


def report_breaker(stats: dict[str, Any]) -> None:
    """The section's table."""
    print(
        f"\nThe breaker: Host.run tracked and untracked, interleaved, {stats['runs']} runs "
        f"(confined: a quarter) after {stats['warmup']} warm-up"
    )
    print(timing.HEAD)
    for label, title in (
        ("full", 'Host.run(["true"], danger-full-access)'),
        ("confined", f'Host.run(["cat", "readme.txt"]) under {stats["provider"]}'),
    ):
        figures = stats[label]
        print(timing.row(f"{title}, tracked", figures["tracked"]))
        print(timing.row(f"{title}, untracked", figures["untracked"]))
        print(
            f"  tracking adds {figures['added_ms']:+.3f} ms ({figures['ratio']:.3f}x); "
            f"the untracked case's own spread (p90 - median) is {figures['spread_ms']:.3f} ms"
        )
        own = figures["breaker_ms"]
        print(f"  the breaker's own calls (admit; finish but the record) take {own:.3f} ms a step")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    stats = bench_breaker(args.runs)
    report_breaker(stats)
    print("\nBENCH " + json.dumps({"breaker": stats}, sort_keys=True, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
