"""``docs/examples/ray_fanout.py`` and ``docs/examples/rollouts.py`` run as the docs say (here
joining the session's cluster with ``--address``): each prints its one JSON line and leaves a
chain that ``stockade verify`` passes; the fan-out's ``stockade log`` names the node and actor
of every step, the rollouts' rewards are one per episode and its exports are on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ground import Box

ray = pytest.importorskip("ray")  # optional: see conftest.py

EXAMPLE = Path(__file__).parents[3] / "docs" / "examples" / "ray_fanout.py"
STOCKADE = [sys.executable, "-c", "from stockade.cli import entry; entry()"]


def test_the_fanout_example(box: Box) -> None:
    address = ray.get_runtime_context().gcs_address
    args = ["--commands", "24", "--actors", "2", "--state", str(box.state), "--address", address]
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    ran = subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    line = json.loads(ran.stdout.strip().splitlines()[-1])
    assert set(line) == {"commands", "actors", "seconds", "per_second", "failed", "verified"}
    assert (line["commands"], line["actors"], line["failed"], line["verified"]) == (24, 2, 0, True)
    assert line["seconds"] > 0 and line["per_second"] > 0

    config = box.root / "config.toml"
    config.write_text(f'[store]\npath = "{box.state / "store.db"}"\n')
    cli_env = {**env, "STOCKADE_CONFIG": str(config), "STOCKADE_NO_SERVER": "1"}
    verified = subprocess.run(
        [*STOCKADE, "verify"], capture_output=True, text=True, timeout=120, env=cli_env, check=False
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    log = subprocess.run(
        [*STOCKADE, "log"], capture_output=True, text=True, timeout=120, env=cli_env, check=True
    )
    lines = log.stdout.splitlines()
    assert len(lines) == 24
    assert all(" exit 0 " in line and "[node " in line and " actor " in line for line in lines)
    assert len({line.rsplit(" actor ", 1)[1] for line in lines}) == 2  # both workers ran steps


ROLLOUTS = EXAMPLE.parent / "rollouts.py"


def test_the_rollouts_example(box: Box) -> None:
    address = ray.get_runtime_context().gcs_address
    args = ["--episodes", "4", "--actors", "2", "--state", str(box.state), "--address", address]
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    # Its steps run `python3` by name: the system's, not this venv's (CI makes it in /tmp,
    # which every sandbox hides: such a step is refused, saying so).
    venv = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv)
    ran = subprocess.run(
        [sys.executable, str(ROLLOUTS), *args],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    line = json.loads(ran.stdout.strip().splitlines()[-1])
    assert (line["episodes"], line["steps"], line["verified"]) == (4, 12, True)
    assert sorted(line["rewards"].values()) == [0.0, 0.0, 1.0, 1.0]  # every other fix is wrong
    exports = sorted((box.state / "exports").iterdir())
    assert len(exports) == 4 and line["exported"] == sum(p.stat().st_size for p in exports)
    config = box.root / "config.toml"
    config.write_text(f'[store]\npath = "{box.state / "store.db"}"\n')
    cli_env = {**env, "STOCKADE_CONFIG": str(config), "STOCKADE_NO_SERVER": "1"}
    verified = subprocess.run(
        [*STOCKADE, "verify"], capture_output=True, text=True, timeout=120, env=cli_env, check=False
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
