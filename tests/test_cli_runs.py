"""State across command-line calls, kept by the warm server: runs that span calls and
background tasks (``stockade start|read|kill|tasks``), as a user runs them: real processes."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade.testing import CLI

STOCKADE = [*CLI]  # the native client when the session runs through the server
FULL = ["--mode", "danger-full-access", "--yes"]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[dict[str, str]]:
    """An environment whose command line goes through a server of its own, stopped after."""
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "STOCKADE_DISABLE_PLUGINS": "bubblewrap,landlock",
        "STOCKADE_SERVER_IDLE": "60",
    }
    for name in ("STOCKADE_NO_SERVER", "STOCKADE_CONFIG", "STOCKADE_RUN", "XDG_RUNTIME_DIR"):
        env.pop(name, None)
    yield env
    subprocess.run(
        [*STOCKADE, "serve", "--stop"], env=env, capture_output=True, timeout=60, check=False
    )


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*STOCKADE, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_task_runs_in_the_background_and_is_read_killed_and_listed(served):
    started = cli(served, "start", *FULL, "--", "sh", "-c", "echo one; sleep 1; echo two; exit 4")
    assert started.returncode == 0, started.stderr
    task = started.stdout.strip()
    assert task.startswith("task-")
    listed = cli(served, "tasks")
    assert listed.returncode == 0 and task in listed.stdout
    follow = cli(served, "read", "--follow", task)
    assert (follow.returncode, follow.stdout) == (4, "one\ntwo\n"), follow.stderr
    done = json.loads(cli(served, "tasks", "--json").stdout)
    assert [(t["task_id"], t["status"], t["exit_code"]) for t in done] == [(task, "completed", 4)]
    sleeper = cli(served, "start", *FULL, "--", "sleep", "60").stdout.strip()
    killed = cli(served, "kill", sleeper)
    assert killed.returncode == 0 and killed.stdout.strip() == f"{sleeper} killed"


def test_a_run_is_the_owner_of_its_tasks(served):
    task = cli(served, "start", "--run", "mine", *FULL, "--", "sleep", "30").stdout.strip()
    other = cli(served, "read", task, "--run", "theirs")
    assert other.returncode == 125 and "unknown" in other.stderr.lower(), other.stderr
    assert cli(served, "tasks", "--run", "theirs").stdout == ""
    mine = {**served, "STOCKADE_RUN": "mine"}
    assert task in cli(mine, "tasks").stdout  # STOCKADE_RUN names it too
    assert cli(mine, "kill", task).returncode == 0


def test_a_budget_counts_the_steps_of_a_run_across_calls(served, tmp_path):
    config = tmp_path / "budget.toml"
    config.write_text("[agents.default]\nbudget = { steps = 2 }\n")
    runs = [
        cli(served, "--config", str(config), "run", "--run", "b", *FULL, "--", "true")
        for _ in range(3)
    ]
    assert [r.returncode for r in runs] == [0, 0, 126], runs[-1].stderr
    assert "budget is spent: this is step 3" in runs[-1].stderr
    # A run of its own per call (no --run) never runs out: each is step 1.
    alone = [cli(served, "--config", str(config), "run", *FULL, "--", "true") for _ in range(3)]
    assert [r.returncode for r in alone] == [0, 0, 0]


def test_a_kept_run_numbers_on_after_its_server_is_replaced(served):
    assert cli(served, "run", "--run", "long", *FULL, "--", "true").returncode == 0
    assert cli(served, "serve", "--stop").returncode == 0
    assert cli(served, "run", "--run", "long", *FULL, "--", "true").returncode == 0
    log = json.loads(cli(served, "log", "--run", "long", "--json").stdout)
    assert [step["step"] for step in log] == [1, 2]  # never two step 1s in one run


def test_in_process_the_state_commands_refuse_and_say_why(served):
    alone = {**served, "STOCKADE_NO_SERVER": "1"}
    for args in (
        ["tasks"],
        ["start", *FULL, "--", "true"],
        ["run", "--run", "x", *FULL, "--", "true"],
    ):
        done = cli(alone, *args)
        assert done.returncode == 125, (args, done.stderr)
        assert "only the warm server keeps it" in done.stderr
    assert not os.path.exists(os.path.join(served["XDG_STATE_HOME"], "stockade", "server", "pid"))


def test_an_invalid_run_name_is_refused(served):
    done = cli(served, "run", "--run", "../x", *FULL, "--", "true")
    assert done.returncode == 125 and "invalid run name '../x'" in done.stderr


def test_the_server_stays_while_a_task_runs(served):
    env = {**served, "STOCKADE_SERVER_IDLE": "1"}
    started = cli(env, "start", *FULL, "--", "sh", "-c", "sleep 3; echo late")
    assert started.returncode == 0, started.stderr
    task = started.stdout.strip()
    time.sleep(2)  # past the idle time: the task keeps the server
    follow = cli(env, "read", "--follow", task)
    assert (follow.returncode, follow.stdout) == (0, "late\n"), follow.stderr
