"""The run page approves through the warm server when one runs, as ``stockade approve`` does.

A step let go ahead from the page then runs in the server (the server counts the call),
and its record is the one ``stockade approve`` makes, the files it changed included, with
the page named as who answered. The control is the same
answer with no server running: the step runs in the page's own process, as before.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.ui import CLI, Ui
from stockade.record.chain import rows
from stockade.record.store import open_store
from stockade.server.paths import Place


@pytest.fixture
def ui(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ui]:
    monkeypatch.delenv("STOCKADE_NO_SERVER", raising=False)  # the page may use a server
    server = Ui(tmp_path)
    try:
        yield server
    finally:
        server.stop()
        subprocess.run([*CLI, "serve", "--stop"], capture_output=True, check=False, timeout=60)


def _served(ui: Ui) -> int:
    done = subprocess.run(
        [*CLI, "serve", "--status", "--json"], capture_output=True, check=False, timeout=60
    )
    return int(json.loads(done.stdout).get("calls_served", -1)) if done.returncode == 0 else -1


def _decision_by(ui: Ui, run: str, step: int) -> list[str]:
    store = open_store(ui.agent.config)
    try:
        return [
            r.body["decision"]["by"]
            for r in rows(store, run)
            if r.step == step and r.kind == "permission"
        ]
    finally:
        store.close()


@pytest.mark.parametrize("server", [True, False], ids=["through-the-server", "control"])
def test_let_go_ahead_runs_through_the_server_when_one_runs(ui: Ui, server: bool) -> None:
    if server:
        warm = subprocess.run(
            [*CLI, "--config", str(ui.config), "run", "--yes", "--mode", "danger-full-access",
             "--", "true"],
            capture_output=True, check=False, timeout=120, cwd=ui.ws,
        )  # fmt: skip
        assert warm.returncode == 0, warm.stderr
        pid = int(Path(Place(os.environ).pid).read_text())
        before = _served(ui)
    run, step = ui.hold(["sh", "-c", "echo made > made"])
    assert ui.answer(run, step, "approve")[0] == 303
    ui.wait_for(lambda: ui.state(run, step) == "done", timeout=60)
    [result] = ui.results(run, step)
    assert "made" in json.dumps(result["changes"])  # the files it changed, recorded
    assert _decision_by(ui, run, step)[-1].endswith("(stockade ui)")
    if server:
        assert _served(ui) == before + 1  # the approve
        assert int(Path(Place(os.environ).pid).read_text()) == pid
    else:
        assert _served(ui) == -1  # no server ran it: the page did
