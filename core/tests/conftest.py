"""Core tests judge the host alone: installed sandbox plugins are blocked for them."""

import pytest


@pytest.fixture(autouse=True)
def _core_only(monkeypatch):
    monkeypatch.setenv("STOCKADE_DISABLE_PLUGINS", "bubblewrap,landlock")
