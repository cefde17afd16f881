"""Shared by the Agents SDK client's tests: a private store, a host per backend."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from agents import set_tracing_disabled

from stockade.config.load import parse_config
from stockade.host import Host
from stockade.layers import mounts
from stockade.testing import FRONT_END_PROFILES

PROFILES = (
    FRONT_END_PROFILES
    + """
[agents.keeper]
workspace = "{ws}"
private = ["private/*"]
"""
)


@pytest.fixture(autouse=True)
def _private_state(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    # Held steps go to a store of the test's own, never the user's.
    state = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    # No network: the SDK's traces would be exported to OpenAI when a key is set.
    set_tracing_disabled(True)
    yield
    # A fork a test kept is mounted (as root): unmounted with it, as pytest removes old folders.
    for point in mounts.overlays_beneath(str(state)):
        mounts.unmount(point)


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


@pytest.fixture(scope="session")
def docs_example() -> ModuleType:
    """``docs/examples/agents_sdk.py``, loaded."""
    path = Path(__file__).resolve().parents[3] / "docs" / "examples" / "agents_sdk.py"
    spec = importlib.util.spec_from_file_location("agents_sdk_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
