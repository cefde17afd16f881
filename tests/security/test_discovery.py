"""Which bwrap is trusted, and failing closed when none works."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from stockade_bubblewrap import discover

from stockade.config import Config
from stockade.errors import SandboxUnavailable
from stockade.types import ExecRequest


def test_auto_picks_bubblewrap_for_confined_modes(make_host, box, mode):
    host = make_host(allow_all=True, config=Config())
    request = box.py("print('ok')", mode=mode)
    result = host.run(type(request)(request.argv, request.cwd, mode=mode, env=request.env))
    assert result.sandbox.provider == "bubblewrap"
    assert result.sandbox.enforcement == "full"


def test_a_bwrap_planted_in_a_writable_root_is_not_trusted(box, monkeypatch):
    fake = box.ws / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    assert str(fake) in discover.system_binaries()
    chosen = discover.select((str(box.ws),))
    assert chosen.usable
    assert chosen.path != str(fake)


def test_no_working_bwrap_fails_closed(make_host, box, monkeypatch, tmp_path):
    broken = tmp_path / "bwrap"
    broken.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    )
    broken.chmod(0o755)
    monkeypatch.setattr(discover, "candidates", lambda: [(str(broken), "system")])
    monkeypatch.setattr(discover, "_tried", {})
    host = make_host(allow_all=True, config=Config(sandbox="bubblewrap"))
    with pytest.raises(SandboxUnavailable, match="user namespaces are blocked"):
        host.run(box.py("print('ran')"))
    auto = make_host(allow_all=True, config=Config())  # auto never falls back to unconfined
    with pytest.raises(SandboxUnavailable, match="cannot confine mode workspace-write"):
        auto.run(ExecRequest(["true"], str(box.ws), mode="workspace-write"))


def test_doctor_reports_the_bwrap_it_found():
    env = {k: v for k, v in os.environ.items() if k != "STOCKADE_DISABLE_PLUGINS"}
    out = subprocess.run(
        [sys.executable, "-c", "from stockade.cli import entry; entry()", "doctor", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    report = json.loads(out.stdout)
    row = next(s for s in report["sandboxes"] if s["name"] == "bubblewrap")
    assert row["ok"] is True
    assert "bubblewrap 0." in row["detail"] and "trial sandbox" in row["detail"]
