"""Section 10 of the bench: the run page of a 1,000-step run (imported by ``bench/run.py``).

One run of 1,000 recorded commands (``echo step N``, so each has a stdout blob to
preview) is written by a real host. Then, interleaved in the same run:

- **page**: the run page's own handler (``Page.run_page``, what ``GET /runs/RUN`` runs on
  the server): read every event of the run and its held steps, pair them, read and check
  each step's output blob for its preview, run ``stockade verify`` over the whole record,
  and render the HTML;
- **verify**: ``stockade.record.verify`` alone, the part of the page that is the record's
  own check;
- **raw**: the floor, reading the same rows with ``stockade.record.chain.rows`` and writing them
  out with ``json.dumps``: what any page of these events would pay before drawing anything.

The target: the page in under 500 ms, median. The ratio page / raw is printed beside it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from typing import Any, Final

import timing  # bench/timing.py

PAGE_TARGET_MS = 500.0
STEPS = 1000
MODE: Final = "danger-full-access"

Row = Callable[[str, dict[str, float]], str]


def bench_ui_page(interleaved: timing.Interleave, runs: int, warmup: int) -> dict[str, Any]:
    """The run page of a 1,000-step run, against ``verify`` and raw rows + JSON."""
    from starlette.requests import Request

    from stockade.config.schema import Config, StoreConfig
    from stockade.host import Host
    from stockade.record.chain import rows
    from stockade.record.store import Store
    from stockade.record.verify import verify
    from stockade.request.spec import ExecRequest
    from stockade_ui.answers import Answers
    from stockade_ui.app import Page
    from stockade_ui.guard import Secrets

    with tempfile.TemporaryDirectory(prefix="stockade-bench-ui-") as scratch:
        path = os.path.join(scratch, "store", "store.db")
        config = Config(store=StoreConfig(path))
        filler = Host(config)
        try:
            for step in range(1, STEPS + 1):
                filler.run(ExecRequest(["echo", f"step {step}"], scratch, mode=MODE, origin="cli"))
            run_id = filler.run_id
        finally:
            filler.close()
        store = Store(path)
        page = Page(store, config, Answers(None), Secrets.new(0))
        scope = {
            "type": "http",
            "method": "GET",
            "path": f"/runs/{run_id}",
            "path_params": {"run_id": run_id},
            "query_string": b"",
            "headers": [],
        }
        sizes: list[int] = []

        def page_case() -> int:
            response = page.run_page(Request(scope))
            sizes.append(len(response.body))
            return 0 if response.status_code == 200 else 1

        def verify_case() -> int:
            return 0 if verify(store).ok else 1

        def raw_case() -> int:
            text = json.dumps([[r.seq, r.kind, r.body] for r in rows(store, run_id)])
            return 0 if text else 1

        try:
            cases = interleaved(
                {"page": page_case, "verify": verify_case, "raw": raw_case}, runs, warmup
            )
            events = sum(1 for _ in rows(store, run_id))
        finally:
            store.close()
    return {
        "runs": runs,
        "warmup": warmup,
        "steps": STEPS,
        "events": events,
        "page_bytes": sizes[-1],
        **cases,
        "ratio": cases["page"]["median"] / cases["raw"]["median"],
        "target_ms": PAGE_TARGET_MS,
    }


def report_ui_page(stats: dict[str, Any], row: Row, head: str) -> None:
    """Print section 10."""
    print(
        f"\n10. The run page, {stats['steps']} steps ({stats['events']} events, "
        f"{stats['page_bytes'] / 1024:.0f} KiB of HTML), interleaved: {stats['runs']} runs "
        f"each after {stats['warmup']} warm-up"
    )
    print(head)
    print(row("Page.run_page: GET /runs/RUN, server side, verify included", stats["page"]))
    print(row("stockade.record.verify alone", stats["verify"]))
    print(row("raw: record.rows(store, run) + json.dumps", stats["raw"]))
    ok = stats["page"]["median"] < PAGE_TARGET_MS
    print(
        f"  page: {stats['page']['median']:.1f} ms median ({stats['ratio']:.1f}x raw)   "
        f"target < {PAGE_TARGET_MS:g} ms: {'met' if ok else 'NOT met'}"
    )


if __name__ == "__main__":  # the section alone: uv run python bench/ui_page.py
    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="stockade-bench-state-")
    figures = bench_ui_page(timing.interleaved, runs=20, warmup=3)
    report_ui_page(figures, timing.row, timing.HEAD)
