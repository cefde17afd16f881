"""Shared fixtures for the executor and run-path tests (real processes, no OS mocks), the run
page's server (``ui``) and a recorded store of the test's own (``state``, ``env``, ``recorded``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from helpers import procs, recording
from helpers.store import TRUTH
from helpers.ui import Ui
from stockade.config.schema import Config, StoreConfig
from stockade.host import Host
from stockade.layers import mounts
from stockade.request.spec import ExecRequest

# The kit's mutation check (31 kit runs against broken providers) is CI's own step
# (`.ci/run`), not the suite's: it judges the kit, and takes minutes.
collect_ignore = [] if os.environ.get("STOCKADE_KIT_MUTANTS") == "1" else ["test_kit_mutants.py"]
if os.environ.get("STOCKADE_CLOCK_SET") != "1":  # it sets the machine's clock: run alone
    collect_ignore.append("security/test_clock_set.py")

FULL = "danger-full-access"
"""The only mode usable without a sandbox plugin."""


@pytest.fixture(autouse=True)
def _private_state(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    # Held steps go to a store of the test's own, never the user's.
    state = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    yield
    # A fork a failed test left mounted (as root) goes with it: pytest removes old folders.
    for point in mounts.overlays_beneath(str(state)):
        mounts.unmount(point)


@pytest.fixture
def host(make_host: Callable[..., Host]) -> Host:
    """A fresh allow-all host with the embedded configuration."""
    return make_host(allow_all=True)


@pytest.fixture
def host_with(make_host: Callable[..., Host]) -> Callable[..., Host]:
    """``host_with(config, **kw)``: an allow-all host with ``config``."""

    def factory(config: Config | None = None, **kwargs: object) -> Host:
        return make_host(allow_all=True, config=config, **kwargs)

    return factory


@pytest.fixture
def escapees() -> Iterator[list[int]]:
    """PIDs a test may leave behind on failure; they are killed after the test."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        procs.kill_quietly(pid)


@pytest.fixture(autouse=True)
def _cli_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    # In-process, or through the warm server when the session has STOCKADE_TEST_SERVER=1.
    from stockade.testing import cli_mode

    cli_mode(monkeypatch)


@pytest.fixture
def upstream() -> Iterator[recording.Upstream]:
    """A live loopback HTTP upstream that keeps every request (:mod:`helpers.recording`)."""
    yield from recording.serving()


@pytest.fixture
def ui(tmp_path: Path) -> Iterator[Ui]:
    """A running ``stockade ui`` (:mod:`helpers.ui`); it must end cleanly after the test."""
    server = Ui(tmp_path)
    try:
        yield server
    finally:
        server.stop()
    assert server.proc.returncode == 0, (tmp_path / "ui.err").read_text()


# --- a store of the test's own (test_verify_*.py, test_declines.py) --------------------------


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """The state folder the CLI and the hosts of a test share."""
    return tmp_path / "state"


@pytest.fixture
def env(state: Path) -> dict[str, str]:
    found = {
        **os.environ,
        "XDG_STATE_HOME": str(state),
        "STOCKADE_DISABLE_PLUGINS": "bubblewrap,landlock",
    }
    found.pop("STOCKADE_CONFIG", None)
    return found


@pytest.fixture
def recorded(make_host: Callable[..., Host], state: Path, tmp_path: Path) -> tuple[Path, str]:
    """Three steps of one run (9 events, 4 blobs) in the store the CLI of ``env`` reads: the
    store, the run."""
    store = state / "stockade" / "store.db"
    host = make_host(config=Config(store=StoreConfig(str(store))), allow_all=True)
    # These tests pin the record's shape (3 events a step): the breaker's taint events,
    # which follow a step that printed, are left out here (tests/security/test_breaker.py).
    host.breaker.finish = lambda _spec, carried, record: record(carried)  # type: ignore[method-assign]
    for argv in (
        ["printf", TRUTH],
        ["sh", "-c", "echo out; echo err >&2"],
        ["printf", "third\\n"],
    ):
        assert host.run(ExecRequest(argv, str(tmp_path), mode=FULL)).ok
    host.close()
    return store, host.run_id
