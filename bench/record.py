"""Section 6 of the bench: what the record costs (imported by ``bench/run.py``).

- Recording: ``Host.run`` of ``true`` with the built-in recorder against the same host with
  the recorder blocked, interleaved; the difference of the medians is what recording one
  command (three signed events in the store) adds. The target is at most 1 ms.
- Verify: 1,000 recorded commands (3,000 events), then ``stockade.record.verify`` over the
  whole chain, timed a few times. The target is under 1 s.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from typing import Any, Final

import timing  # bench/timing.py

RECORD_TARGET_MS = 1.0
VERIFY_TARGET_S = 1.0
VERIFY_COMMANDS = 1000
MODE: Final = "danger-full-access"


def bench_record(runs: int, warmup: int, interleaved: timing.Interleave) -> dict[str, Any]:
    """The recording overhead per command, and the time to verify 1,000 commands."""
    from stockade.config.schema import Config, PluginsConfig, StoreConfig
    from stockade.host import Host
    from stockade.record.store import Store
    from stockade.record.verify import verify
    from stockade.request.spec import ExecRequest

    with tempfile.TemporaryDirectory(prefix="stockade-bench-record-") as scratch:
        store = os.path.join(scratch, "timed", "store.db")
        recorded = Host(Config(store=StoreConfig(store)))
        unrecorded = Host(Config(plugins=PluginsConfig(disable=("stockade.builtin.recorder",))))
        request = ExecRequest(["true"], scratch, mode=MODE, origin="cli")

        def case(host: Host) -> Callable[[], int]:
            def run() -> int:
                code = host.run(request).exit_code
                return code if code is not None else -1

            return run

        try:
            cases = interleaved(
                {"recorded": case(recorded), "unrecorded": case(unrecorded)}, runs, warmup
            )
        finally:
            recorded.close()
            unrecorded.close()
        chain_path = os.path.join(scratch, "chain", "store.db")
        filler = Host(Config(store=StoreConfig(chain_path)))
        try:
            for _ in range(VERIFY_COMMANDS):
                filler.run(request)
        finally:
            filler.close()
        opened = Store(chain_path)
        timings = []
        try:
            for _ in range(3):
                start = time.perf_counter()
                verdict = verify(opened)
                timings.append(time.perf_counter() - start)
        finally:
            opened.close()
    if not verdict.ok:
        raise SystemExit(f"bench: the fresh chain does not verify: {verdict.problem}")
    overhead = cases["recorded"]["median"] - cases["unrecorded"]["median"]
    return {
        "runs": runs,
        "warmup": warmup,
        **cases,
        "overhead_ms": overhead,
        "target_overhead_ms": RECORD_TARGET_MS,
        "verify_commands": VERIFY_COMMANDS,
        "verify_events": verdict.events,
        "verify_s": min(timings),
        "verify_target_s": VERIFY_TARGET_S,
    }
