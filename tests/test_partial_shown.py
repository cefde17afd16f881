"""``partial`` enforcement is said plainly: one stderr line of ``stockade run`` naming what is
not enforced, and the modes of ``stockade doctor``.

Landlock below ABI 6 with ``accept_partial`` is the real case (``max_abi`` stands in for an
older kernel); the same provider at the kernel's own ABI is the control that says nothing.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from helpers.cli import stockade

PARTIAL = "[plugins.settings.landlock]\nmax_abi = 4\naccept_partial = true\n"
SELECTED = 'sandbox = "landlock"\n'


def _cli(tmp_path: Path, config: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "stockade.toml"
    path.write_text(config, encoding="utf-8")
    return stockade("--config", str(path), *args, cwd=tmp_path)


def _partial_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "PARTIAL enforcement" in line]


def test_run_names_what_partial_enforcement_leaves_out(tmp_path):
    done = _cli(tmp_path, PARTIAL, "run", "--sandbox", "landlock", "--", "echo", "hi")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hi\n"
    [line] = _partial_lines(done.stderr)
    assert line.startswith("stockade: PARTIAL enforcement: sandbox landlock")
    assert "device ioctls (ABI 5)" in line
    assert "signals to processes outside the sandbox (ABI 6)" in line
    result = json.loads(
        _cli(tmp_path, PARTIAL, "run", "--json", "--sandbox", "landlock", "--", "true").stdout
    )
    assert result["sandbox"]["enforcement"] == "partial"
    # Control: the kernel's own ABI enforces everything, and nothing is said.
    full = _cli(tmp_path, "", "run", "--sandbox", "landlock", "--", "echo", "hi")
    assert full.returncode == 0, full.stderr
    assert _partial_lines(full.stderr) == []


def test_doctor_shows_partial_modes(tmp_path):
    done = _cli(tmp_path, SELECTED + PARTIAL, "doctor")
    rows = [line for line in done.stdout.splitlines() if line.startswith("  [ok] read-only")]
    assert len(rows) == 1
    assert "sandbox landlock; PARTIAL enforcement, not enforced:" in rows[0]
    assert "device ioctls (ABI 5)" in rows[0]
    assert "PARTIAL enforcement of read-only, workspace-write" in done.stdout.splitlines()[-1]
    report = json.loads(_cli(tmp_path, SELECTED + PARTIAL, "doctor", "--json").stdout)
    assert report["partial"] == ["read-only", "workspace-write"]
    # Control: the same provider at the kernel's ABI is not partial.
    full = _cli(tmp_path, SELECTED, "doctor")
    assert "PARTIAL" not in full.stdout
    assert json.loads(_cli(tmp_path, SELECTED, "doctor", "--json").stdout)["partial"] == []
