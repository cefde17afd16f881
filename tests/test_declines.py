"""Declines are signed events: every path that declines a held step leaves a ``decline``
event in the record, and the record verifies after it.

The paths: ``stockade decline``, the run page's **Decline**, an MCP elicitation declined or
cancelled, and any caller of ``Host.answer(..., approve=False)`` (a skill whose copy was
removed, a program expiring held steps). A terminal ``no`` is the ``permission`` event
itself (the step is never held); that is covered by the policy tests.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers.server import FULL
from helpers.store import _rows, check, cli
from stockade.config.schema import Config, StoreConfig
from stockade.errors import PolicyHeld
from stockade.host import Host
from stockade.record.chain import rows
from stockade.record.store import Store, store_path
from stockade.record.verify import verify
from stockade.request.spec import ExecRequest

# --- declines are signed events -----------------------------------------------------------


def _held(env: dict[str, str]) -> tuple[str, int]:
    held = cli("run", "--mode", FULL, "--", "sh", "-c", "echo never; rm -f none", env=env)
    assert held.returncode == 126, held.stderr
    [step] = json.loads(cli("pending", "--json", env=env).stdout)
    return step["run_id"], step["step"]


def _decline_event(state: Path, run: str) -> dict[str, Any]:
    found = [r for r in _rows(state / "stockade" / "store.db") if r["kind"] == "decline"]
    [event] = [r for r in found if r["run_id"] == run]
    return json.loads(event["body"])


def test_stockade_decline_leaves_a_signed_decline_event(env, state):
    run, step = _held(env)
    assert cli("verify", env=env).returncode == 0
    declined = cli("decline", run, str(step), env=env)
    assert declined.returncode == 0, declined.stderr
    body = _decline_event(state, run)
    assert body["reason"] == "declined" and body["by"].endswith("(stockade decline)")
    said = cli("verify", env=env)
    assert said.returncode == 0 and "3 of 3 event signatures hold" in said.stdout
    [logged] = json.loads(cli("log", "--json", env=env).stdout)
    assert logged["state"] == "declined"
    replayed = cli("replay", run, env=env).stdout.splitlines()
    assert "decline" in replayed[-1] and "declined by " in replayed[-1]
    assert "(stockade decline): it never runs" in replayed[-1]
    # Declined once: a second answer is refused, and records nothing more.
    assert cli("approve", run, str(step), env=env).returncode != 0
    assert [r["kind"] for r in _rows(state / "stockade" / "store.db")][-1] == "decline"


@pytest.mark.parametrize(
    ("by", "reason"),
    [
        ("mcp-elicitation:inspector", "decline"),  # what stockade-mcp passes, answered no
        ("mcp-elicitation:inspector", "cancel"),  # ...or dismissed
        ("stockade (held too long)", "expired"),  # a step nobody answered in time
    ],
)
def test_host_answer_records_every_kind_of_decline(
    make_host: Callable[..., Host], tmp_path: Path, by: str, reason: str
):
    path = tmp_path / "s" / "store.db"
    host = make_host(config=Config(store=StoreConfig(str(path))))
    with pytest.raises(PolicyHeld) as held:
        host.run(ExecRequest(["sh", "-c", "rm -f none"], str(tmp_path), mode=FULL))
    run, step = held.value.details["run_id"], held.value.details["step"]
    host.answer(run, step, approve=False, by=by, reason=reason)
    [event] = [r for r in _rows(path) if r["kind"] == "decline"]
    assert (event["run_id"], event["step"]) == (run, step)
    assert json.loads(event["body"])["by"] == by
    assert json.loads(event["body"])["reason"] == reason
    assert check(path).ok


def test_an_approval_records_no_decline(make_host, tmp_path):
    path = tmp_path / "s" / "store.db"
    host = make_host(config=Config(store=StoreConfig(str(path))))
    with pytest.raises(PolicyHeld) as held:
        host.run(ExecRequest(["sh", "-c", "rm -f none"], str(tmp_path), mode=FULL))
    run, step = held.value.details["run_id"], held.value.details["step"]
    host.answer(run, step, approve=True, by="alice")
    assert "decline" not in [r["kind"] for r in _rows(path)]  # control for the test above


# --- the run page and MCP ---------------------------------------------------------------


def test_the_run_page_declines_into_the_record_and_counts_only_its_run(ui):
    ui.run(["echo", "another run's step"])
    ui.agent.close()
    ui._agent = None  # a new host: a new run
    run, step = ui.hold(["sh", "-c", "echo never; rm -f none"])
    status, _, _ = ui.answer(run, step, "decline")
    assert status == 303
    page = ui.page(f"/runs/{run}")
    assert "(stockade ui)" in page and "declined: it never runs" in page
    store = Store(store_path(ui.agent.config))
    try:
        kinds = [r.kind for r in rows(store, run)]
        verdict = verify(store)
    finally:
        store.close()
    assert kinds == ["action", "permission", "decline"]
    assert verdict.ok and verdict.events == 7  # the other run's 4: its output's taint too
    # The box counts this run's events within the whole record, not the record as the run.
    assert "This run: 3 events, and its 0 output blobs" in page
    assert "The whole record they are part of: 7 events" in page


@pytest.mark.parametrize("action", ["decline", "cancel"])
@pytest.mark.asyncio
async def test_an_mcp_elicitation_declined_or_cancelled_is_a_signed_decline_event(
    tmp_path: Path, action: str
):
    from helpers.mcp_session import CONFIG, answering, connect  # the MCP tests' helpers

    ws = tmp_path / "ws"
    ws.mkdir()
    config = tmp_path / "stockade.toml"
    config.write_text(CONFIG.format(ws=ws), encoding="utf-8")
    setup = {"ws": ws, "config": config, "tmp": tmp_path}
    asked: list[str] = []
    async with connect(setup, "careful", elicit=answering(action, asked)) as session:
        result = await session.call_tool("run_command", {"argv": ["touch", "made"]})
    assert result.is_error and len(asked) == 1 and not (ws / "made").exists()
    store = Path(os.environ["XDG_STATE_HOME"]) / "stockade" / "store.db"
    events = _rows(store)
    assert [e["kind"] for e in events] == ["action", "permission", "decline"]
    assert json.loads(events[-1]["body"])["by"] == "mcp-elicitation:pytest"
    assert check(store).ok
