"""``stockade ui`` as a command: the web stack imported only when chosen, a clear error
without the plugin or with a taken port, a step let go ahead that waits for a busy workspace,
and the steps it started aborted when it stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from helpers.ui import CLI

# --- the command line ---------------------------------------------------------------------


def test_the_cli_does_not_import_the_web_stack_unless_ui_is_chosen():
    # stockade_ui.plugin is loaded by every host (it offers the command); the server is not.
    web = ("starlette", "uvicorn", "jinja2", "stockade_ui.app", "stockade_ui.server")
    code = (
        "import sys; from stockade.cli import main; main(['pending']); "
        f"print(sorted(m for m in {web!r} if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert proc.stdout.strip() == "[]"


def test_without_stockade_ui_the_command_says_what_to_install():
    proc = subprocess.run(
        [*CLI, "ui", "--no-open"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**os.environ, "STOCKADE_DISABLE_PLUGINS": "ui"},
    )
    assert proc.returncode == 125
    assert "error[plugin]: the run page is not installed" in proc.stderr
    assert "pip install stockade-ui" in proc.stderr


def test_a_taken_port_is_a_clear_error(ui):
    proc = subprocess.run(
        [*CLI, "ui", "--port", str(ui.port), "--no-open"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 125
    assert f"cannot listen on 127.0.0.1:{ui.port}" in proc.stderr


def test_an_approved_step_waits_for_a_busy_workspace_then_runs_from_the_page(ui):
    from stockade.workspace.folders import Locks

    run, step = ui.hold(["touch", "late.txt"])
    other = Locks(ui.agent.config, "r-other")
    with other.hold(str(ui.ws)):
        assert ui.answer(run, step, "approve")[0] == 303
        ui.wait_for(lambda: "r-other" in ui.page(f"/runs/{run}"))
        page = ui.page(f"/runs/{run}")
        assert "The page could not run it:" in page
        assert ui.state(run, step) == "approved"  # not spent by the refusal
        assert "Run it now" in page
    assert ui.answer(run, step, "run")[0] == 303
    ui.wait_for(lambda: ui.state(run, step) == "done")
    assert (ui.ws / "late.txt").exists()
    assert "The page could not run it:" not in ui.page(f"/runs/{run}")


def test_stopping_the_server_aborts_the_steps_it_started(ui):
    run, step = ui.hold(["sh", "-c", "sleep 60"])
    assert ui.answer(run, step, "approve")[0] == 303
    ui.wait_for(lambda: ui.state(run, step) == "running")
    started = time.monotonic()
    ui.proc.send_signal(signal.SIGTERM)
    assert ui.proc.wait(30) == 0
    assert time.monotonic() - started < 20
    (result,) = ui.results(run, step)
    assert result["aborted"] is True
    assert ui.state(run, step) == "done"
