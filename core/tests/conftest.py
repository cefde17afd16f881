"""Core tests judge the host alone: installed sandbox plugins are blocked for them."""

import pytest


@pytest.fixture(autouse=True)
def _core_only(monkeypatch):
    monkeypatch.setenv("STOCKADE_DISABLE_PLUGINS", "bubblewrap,landlock")


@pytest.fixture(autouse=True)
def _private_state(monkeypatch, tmp_path_factory):
    # Held steps go to a store of the test's own, never the user's.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


@pytest.fixture(autouse=True)
def _cli_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    # In-process, or through the warm server when the session has STOCKADE_TEST_SERVER=1.
    from stockade.testing import cli_mode

    cli_mode(monkeypatch)
