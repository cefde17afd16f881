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

from stockade.config.schema import Config
from stockade.request.spec import ExecRequest

PYTHON = "/usr/bin/python3"  # the system interpreter: visible inside every sandbox
MODES = ("read-only", "workspace-write")
SANDBOXES = ("bubblewrap", "landlock")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every attack against every confining provider, unless a test names its own.

    ``@pytest.mark.sandboxes("bubblewrap")`` limits a test to those providers (for what
    only one of them has, such as bwrap's own messages). ``@pytest.mark.gap("landlock",
    "why")`` pins a known gap: the attack is expected to succeed there (strict xfail), so
    the day it is closed the test says so and the docs' list of gaps must change.
    """
    if "sandbox" not in metafunc.fixturenames:
        return
    only = metafunc.definition.get_closest_marker("sandboxes")
    names = only.args if only else SANDBOXES
    gaps = {m.args[0]: m.args[1] for m in metafunc.definition.iter_markers("gap")}
    params = [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=f"known gap: {gaps[name]}"))
        if name in gaps
        else name
        for name in names
    ]
    metafunc.parametrize("sandbox", params)


@pytest.fixture(scope="session", autouse=True)
def _capable():
    assert platform.machine() == "x86_64", "the attack suite uses x86_64 syscall numbers"
    assert os.path.exists(PYTHON), f"{PYTHON} is needed inside the sandbox"
    from stockade_bubblewrap.provider import BubblewrapSandbox
    from stockade_landlock.provider import LandlockSandbox

    for provider in (BubblewrapSandbox, LandlockSandbox):
        probe = provider.probe()
        assert probe.usable, f"{provider.PLUGIN_NAME} must work on this machine: {probe.detail}"
    assert "partial" not in LandlockSandbox.probe().detail, "the suite needs Landlock ABI >= 6"


class Box:
    """A private directory with ``ws`` (the workspace), ``home`` and ``outside``."""

    def __init__(self, root: Path, sandbox: str) -> None:
        self.root = root
        self.sandbox = sandbox
        self.canary = "CANARY-" + secrets.token_hex(8)
        self.ws = root / "ws"
        self.home = root / "home"
        self.outside = root / "outside"
        for d in (self.ws, self.home, self.outside):
            d.mkdir()
        self.secret = self.outside / "secret.txt"
        self.secret.write_text(self.canary)

    @property
    def write_refused(self) -> str:
        """What a write the sandbox refuses fails with: a read-only mount, or Landlock."""
        return "Read-only file system" if self.sandbox == "bubblewrap" else "Permission denied"

    def request(self, argv, *, mode="workspace-write", **kw) -> ExecRequest:
        env = {"HOME": str(self.home), **kw.pop("env", {})}
        return ExecRequest(
            argv, str(self.ws), mode=mode, sandbox=self.sandbox, env=env, timeout=60, **kw
        )

    def py(self, source: str, *args: str, mode="workspace-write", **kw) -> ExecRequest:
        return self.request([PYTHON, "-S", "-c", source, *args], mode=mode, **kw)


@pytest.fixture
def box(sandbox):
    base = Path.home() / ".stockade-tests"
    base.mkdir(mode=0o700, exist_ok=True)
    root = Path(tempfile.mkdtemp(dir=base))
    try:
        yield Box(root, sandbox)
    finally:
        subprocess.run(["chmod", "-R", "u+rwX", str(root)], check=False)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def host(make_host, sandbox):
    return make_host(allow_all=True, config=Config(sandbox=sandbox))


@pytest.fixture(params=MODES)
def mode(request):
    return request.param
