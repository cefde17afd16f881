"""The kit's hidden-path attacks (:mod:`stockade.conformance.suite.test_hidden_paths`); both
of the project's providers say the same of every path, and the command line's exit status
126 and its notes."""

from __future__ import annotations

import os
import subprocess
import sys

from stockade.config.schema import Config
from stockade.conformance.suite.test_hidden_paths import *  # noqa: F403
from stockade.conformance.suite.test_hidden_paths import MARK, venv
from stockade.policy.resolve import resolve
from stockade.request.plan import HiddenPath
from stockade.request.spec import ExecRequest

from .conftest import PYTHON


def test_both_providers_say_the_same(box, var_tmp):
    from stockade_bubblewrap.provider import BubblewrapSandbox
    from stockade_landlock.provider import LandlockSandbox

    (box.ws / ".aws").mkdir()
    (box.home / ".ssh").mkdir()
    request = ExecRequest(
        ["true"], str(box.ws), mode="workspace-write", env={"HOME": str(box.home)}
    )
    spec = resolve(request, Config(), os.environ)
    paths = [
        f"{var_tmp}/venv/bin/python3",
        "/var/tmp",
        "/var/tmpfoo/x",
        "/tmp/x",
        "/run/x",
        "/var/run/x",
        "/dev/shm/x",
        "/dev/null",
        "/etc/shadow",
        "/etc/shadowy/x",
        "/etc/passwd",
        "/usr/bin/env",
        f"{box.ws}/x",
        f"{box.ws}/.aws/config",
        f"{box.ws}/.awsome",
        f"{box.home}/.ssh/id_ed25519",
        f"{box.home}/.sshx",
        f"{box.home}/.cache/pip/x",
        f"{box.outside}/x",
        # The same hidden file named the ways an attacker might: all hidden alike.
        f"/proc/self/root{var_tmp}/x",
        f"//{str(var_tmp).lstrip('/')}/x",
        f"/var//tmp/./{var_tmp.name}/x",
        f"/var/tmp/../tmp/{var_tmp.name}/x",
    ]
    bubblewrap = BubblewrapSandbox({})
    landlock = LandlockSandbox({})
    said = {p: bubblewrap.hides(p, spec) for p in paths}
    assert said == {p: landlock.hides(p, spec) for p in paths}
    assert said[f"{var_tmp}/venv/bin/python3"] == HiddenPath(
        f"{var_tmp}/venv/bin/python3", "/var/tmp", "private"
    )
    assert said["/etc/shadow"] is not None and said["/etc/shadow"].kind == "system-secret"
    assert said[f"{box.ws}/.aws/config"].kind == "credential-store"  # type: ignore[union-attr]
    assert said[f"{box.home}/.ssh/id_ed25519"].kind == "credential-store"  # type: ignore[union-attr]
    assert said["/dev/shm/x"] == HiddenPath("/dev/shm/x", "/dev", "private")
    for alias in paths[-4:]:
        assert said[alias] == HiddenPath(alias, "/var/tmp", "private"), alias
    for shown in ("/var/tmpfoo/x", "/etc/passwd", "/usr/bin/env", "/dev/null"):
        assert said[shown] is None, shown
    for shown in ("x", ".awsome"):
        assert said[f"{box.ws}/{shown}"] is None
    assert said[f"{box.home}/.sshx"] is None and said[f"{box.outside}/x"] is None


def _cli(box, *argv):
    env = {**os.environ, "HOME": str(box.home), "XDG_CONFIG_HOME": str(box.root / "cfg")}
    env.pop("STOCKADE_CONFIG", None)
    env.pop("STOCKADE_DISABLE_PLUGINS", None)
    stockade = [sys.executable, "-c", "from stockade.cli import entry; entry()"]
    return subprocess.run(
        [*stockade, "run", "--yes", "--sandbox", box.sandbox, "--", *argv],
        cwd=box.ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_says_126_and_how_to_fix_it(box, var_tmp):
    python = venv(var_tmp / "venv")
    proc = _cli(box, str(python), "-S", "-c", MARK)
    assert proc.returncode == 126, proc.stderr
    assert f"error[spawn_failed]: cannot start {python}: it lies in /var/tmp" in proc.stderr
    assert "(private /var/tmp)" in proc.stderr
    assert "hint: move or install it outside /var/tmp" in proc.stderr
    assert f"--grant-write {var_tmp}" in proc.stderr
    assert not (box.ws / "ran").exists()
    # Control: the same command with a program the sandbox shows runs, status 0.
    assert _cli(box, PYTHON, "-S", "-c", MARK).returncode == 0
    assert (box.ws / "ran").exists()


def test_cli_notes_a_hidden_argument(box, var_tmp):
    source = var_tmp / "x"
    source.write_text(box.canary)
    proc = _cli(box, "cp", str(source), ".")
    assert proc.returncode == 1
    assert f"stockade: {source} is hidden inside the sandbox (private /var/tmp)\n" in proc.stderr
    # Control: a copy that works carries no note.
    proc = _cli(box, "cp", str(box.secret), ".")
    assert proc.returncode == 0 and "hidden inside the sandbox" not in proc.stderr
