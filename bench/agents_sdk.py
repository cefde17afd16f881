"""A section of the bench: a command through the OpenAI Agents SDK's client for Stockade.

    uv run python bench/agents_sdk.py [--runs N]

``session.exec("true", shell=False)`` on a :class:`stockade_agents.StockadeSandboxClient`
session (the SDK's ``SandboxSession`` wrapper around it, as a ``SandboxAgent`` calls it),
interleaved in the same process with the same command through ``Host.run`` and
``Host.run_async``, same configuration, same workspace, same confinement (the sandbox
``auto`` picks). The session runs each step with ``Host.run`` on one worker thread, so its
cost over ``Host.run`` is that hop, the SDK's wrapper and the result's conversion. Target
(issue 38): at most 2 ms over ``Host.run`` (medians).

Then a session's ``stop`` and ``start`` again (persist, then restore) on a workspace of 1,000
small files, interleaved: with Stockade's snapshots (``StockadeSnapshotSpec``: a copy into the
store, a copy back) and with the SDK's tar (``LocalSnapshotSpec``: a tar written to a file,
extracted back); no target, a figure to compare.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

import timing  # bench/timing.py

TARGET_MS = 2.0


def bench_agents_sdk(runs: int) -> dict[str, Any]:
    """Interleaved medians of the client's exec and the host's run, in milliseconds."""
    from agents.sandbox import Manifest

    from stockade.host import Host
    from stockade.request.spec import ExecRequest
    from stockade_agents import StockadeSandboxClient

    loop = asyncio.new_event_loop()
    with tempfile.TemporaryDirectory(prefix="stockade-bench-agents-") as scratch:
        host = Host.from_environment()
        client = StockadeSandboxClient(host)
        session = loop.run_until_complete(client.create(manifest=Manifest(root=scratch)))
        loop.run_until_complete(session.start())
        request = ExecRequest(["true"], scratch, workspace=scratch)

        def direct() -> int:
            return host.run(request).exit_code or 0

        def direct_async() -> int:
            return loop.run_until_complete(host.run_async(request)).exit_code or 0

        def through_client() -> int:
            return loop.run_until_complete(session.exec("true", shell=False)).exit_code

        try:
            cases = {"Host.run": direct, "Host.run_async": direct_async, "client": through_client}
            stats = timing.interleaved(cases, runs, warmup=max(10, runs // 10))
            sandbox = host.run(request).sandbox.provider
        finally:
            loop.run_until_complete(session.aclose())
            host.close()
            loop.close()
    return {
        "runs": runs,
        "sandbox": sandbox,
        **stats,
        "overhead_ms": stats["client"]["median"] - stats["Host.run"]["median"],
        "overhead_min_ms": stats["client"]["min"] - stats["Host.run"]["min"],
        "over_async_ms": stats["client"]["median"] - stats["Host.run_async"]["median"],
    }


def bench_snapshots(runs: int, files: int = 1000) -> dict[str, Any]:
    """Interleaved stop-and-start of two sessions, Stockade's snapshot against the SDK's tar."""
    from agents.sandbox import Manifest
    from agents.sandbox.snapshot import LocalSnapshotSpec, SnapshotSpec

    from stockade.host import Host
    from stockade_agents import StockadeSandboxClient, StockadeSnapshotSpec

    loop = asyncio.new_event_loop()
    # Under the home: a folder under /tmp is the runs' scratch on Landlock.
    with tempfile.TemporaryDirectory(prefix=".stockade-bench-snap-", dir=Path.home()) as scratch:
        host = Host.from_environment()
        client = StockadeSandboxClient(host)
        specs: dict[str, SnapshotSpec] = {
            "stockade": StockadeSnapshotSpec(),
            "tar": LocalSnapshotSpec(base_path=Path(scratch, "tars")),
        }
        sessions = {}
        for name, spec in specs.items():
            root = Path(scratch, name)
            for index in range(files):
                folder = root / f"d{index % 20}"
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"f{index}.txt").write_text(f"file {index}\n" * 8)
            made = client.create(manifest=Manifest(root=str(root)), snapshot=spec)
            sessions[name] = loop.run_until_complete(made)
            loop.run_until_complete(sessions[name].start())

        def cycle(session: Any) -> Any:  # noqa: ANN401 - the SDK's session wrapper
            def run() -> int:
                loop.run_until_complete(session.stop())
                loop.run_until_complete(session.start())
                return 0

            return run

        try:
            cases = {name: cycle(session) for name, session in sessions.items()}
            stats = timing.interleaved(cases, runs, warmup=2)  # the copies run on worker threads
            kept = sum(1 for _ in Path(scratch, "stockade").rglob("*.txt"))
        finally:
            for session in sessions.values():
                loop.run_until_complete(session.aclose())
            host.close()
            loop.close()
    if kept != files:
        raise SystemExit(f"bench: the restored workspace holds {kept} of {files} files")
    return {"runs": runs, "files": files, **stats}


def report_snapshots(stats: dict[str, Any]) -> None:
    """Print the snapshot part."""
    timing.table(
        f"The Agents SDK client, a session's stop and start again on {stats['files']} files, "
        f"interleaved: {stats['runs']} runs each",
        [
            ("StockadeSnapshotSpec (copy into the store, copy back)", stats["stockade"]),
            ("LocalSnapshotSpec (the SDK's tar, written and extracted)", stats["tar"]),
        ],
    )


def report(stats: dict[str, Any]) -> None:
    """Print the section."""
    timing.table(
        f"The Agents SDK client, `true` (sandbox {stats['sandbox']}), interleaved: "
        f"{stats['runs']} runs each",
        [
            ('Host.run(ExecRequest(["true"]))', stats["Host.run"]),
            ('await Host.run_async(ExecRequest(["true"]))', stats["Host.run_async"]),
            ('await session.exec("true") (StockadeSandboxClient)', stats["client"]),
        ],
    )
    ok = stats["overhead_ms"] <= TARGET_MS
    print(
        f"  the client adds {stats['overhead_ms']:.3f} ms median over Host.run   "
        f"target <= {TARGET_MS:g} ms: {'met' if ok else 'NOT met'}"
    )
    print(
        f"  (minimums: {stats['overhead_min_ms']:.3f} ms over Host.run; medians: "
        f"{stats['over_async_ms']:.3f} ms over Host.run_async)"
    )


def bench_all(runs: int) -> dict[str, Any]:
    """Both parts, the host's store in a private folder."""
    with tempfile.TemporaryDirectory(prefix="stockade-bench-state-") as state:
        os.environ["XDG_STATE_HOME"] = state
        return {**bench_agents_sdk(runs), "snapshots": bench_snapshots(max(runs // 20, 5))}


def report_all(stats: dict[str, Any]) -> None:
    """Both parts' tables."""
    report(stats)
    report_snapshots(stats["snapshots"])


if __name__ == "__main__":
    raise SystemExit(timing.main("agents_sdk", __doc__ or "", bench_all, report_all, runs=200))
