"""The attack suite's ground: a box of canaries outside the workspace, live listeners, hosts.

Everything is planted under the user's home (never under /tmp, which the sandbox replaces
with a private tmpfs: a canary there would be hidden for the wrong reason). Each test has a
control beside its attack (a file that must be readable, a write that must land) so that a
pass means the sandbox stopped the attack, not that the attack never reached anything.
"""

from __future__ import annotations

import os
import platform
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from stockade.config import Config
from stockade.types import ExecRequest

PYTHON = "/usr/bin/python3"  # the system interpreter: visible inside every sandbox
MODES = ("read-only", "workspace-write")


@pytest.fixture(scope="session", autouse=True)
def _capable():
    assert platform.machine() == "x86_64", "the attack suite uses x86_64 syscall numbers"
    assert os.path.exists(PYTHON), f"{PYTHON} is needed inside the sandbox"
    from stockade_bubblewrap.provider import BubblewrapSandbox

    probe = BubblewrapSandbox.probe()
    assert probe.usable, f"bubblewrap must work on this machine: {probe.detail}"


class Box:
    """A private directory with ``ws`` (the workspace), ``home`` and ``outside``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.canary = "CANARY-" + secrets.token_hex(8)
        self.ws = root / "ws"
        self.home = root / "home"
        self.outside = root / "outside"
        for d in (self.ws, self.home, self.outside):
            d.mkdir()
        self.secret = self.outside / "secret.txt"
        self.secret.write_text(self.canary)

    def request(self, argv, *, mode="workspace-write", **kw) -> ExecRequest:
        env = {"HOME": str(self.home), **kw.pop("env", {})}
        return ExecRequest(
            argv, str(self.ws), mode=mode, sandbox="bubblewrap", env=env, timeout=60, **kw
        )

    def py(self, source: str, *args: str, mode="workspace-write", **kw) -> ExecRequest:
        return self.request([PYTHON, "-S", "-c", source, *args], mode=mode, **kw)


@pytest.fixture
def box():
    base = Path.home() / ".stockade-tests"
    base.mkdir(mode=0o700, exist_ok=True)
    root = Path(tempfile.mkdtemp(dir=base))
    try:
        yield Box(root)
    finally:
        subprocess.run(["chmod", "-R", "u+rwX", str(root)], check=False)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def host(make_host):
    return make_host(allow_all=True, config=Config(sandbox="bubblewrap"))


@pytest.fixture(params=MODES)
def mode(request):
    return request.param
