"""Shared by the Agents SDK client's tests: a private store, a host per backend."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from agents import set_tracing_disabled

from stockade.config.load import parse_config
from stockade.host import Host

PROFILES = """
[agents.tester]
workspace = "{ws}"
ask = []

[agents.careful]
workspace = "{ws}"
ask = ["writes"]

[agents.keeper]
workspace = "{ws}"
private = ["private/*"]

[agents.echoer]
workspace = "{ws}"
programs = ["echo", "sh"]
"""


@pytest.fixture(autouse=True)
def _private_state(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Held steps go to a store of the test's own, never the user's.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
    # No network: the SDK's traces would be exported to OpenAI when a key is set.
    set_tracing_disabled(True)


@pytest.fixture
def make_host(home_tmp: Path) -> Iterator[Callable[[str], Host]]:
    """``make_host(sandbox)``: a host on that backend, its profiles' workspace ``ws`` under
    the home (on Landlock a folder under /tmp is the runs' scratch, not readable to them)."""
    made: list[Host] = []
    ws = home_tmp / "ws"
    ws.mkdir()

    def factory(sandbox: str) -> Host:
        config = parse_config(f'sandbox = "{sandbox}"\n' + PROFILES.format(ws=ws))
        host = Host(config, environ=dict(os.environ))
        made.append(host)
        return host

    yield factory
    for host in made:
        host.close()


@pytest.fixture
def home_tmp() -> Iterator[Path]:
    """A private folder under the home: the sandbox's /tmp is its own, so a canary there
    would not show a breach."""
    base = Path.home() / ".stockade-tests"
    base.mkdir(mode=0o700, exist_ok=True)
    root = Path(tempfile.mkdtemp(dir=base))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
