"""The project's attack suite: the conformance kit's attacks on bubblewrap and Landlock, and the
project's own attacks on the host (server, policy, roots, record, peers' ports).

The kit's attacks (:mod:`stockade.conformance.suite`, shown here by the thin ``test_*.py``
files that import them) run against :data:`SANDBOXES` unless ``--sandbox`` names others; what
each expects comes from the providers' declarations. The project's own tests below name the
providers themselves: ``@pytest.mark.sandboxes("bubblewrap")`` limits a test to those, and
``@pytest.mark.gap("landlock", "why")`` pins a known gap of one (a strict xfail, so the day it
is closed the test says so and the docs' list of gaps must change).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from stockade.conformance import ground
from stockade.conformance.ground import MODES, PYTHON

__all__ = ["MODES", "PYTHON", "SANDBOXES", "Box"]

SANDBOXES = ("bubblewrap", "landlock")


def pytest_configure(config: pytest.Config) -> None:
    if not config.option.conformance_sandboxes:
        config.option.conformance_sandboxes = list(SANDBOXES)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize the project's own tests (the kit's plugin does the kit's attacks)."""
    if metafunc.definition.get_closest_marker("promise"):
        return
    if "mode" in metafunc.fixturenames:
        metafunc.parametrize("mode", MODES)
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
    providers = ground.providers()
    for name in SANDBOXES:
        missing = ground.incapable(providers[name])
        assert missing is None, missing
    detail = providers["landlock"].probe().detail
    assert "partial" not in detail, "the suite needs Landlock ABI >= 6"


class NamedBox(ground.Box):
    """The kit's box, with what the project's own tests know of its two providers."""

    @property
    def write_refused(self) -> str:
        """What a write the sandbox refuses fails with: a read-only mount, or Landlock."""
        return "Read-only file system" if self.sandbox == "bubblewrap" else "Permission denied"


Box = NamedBox


@pytest.fixture
def box(sandbox):
    base = Path.home() / ".stockade-tests"
    base.mkdir(mode=0o700, exist_ok=True)
    made = NamedBox(Path(tempfile.mkdtemp(dir=base)), sandbox, ground.providers()[sandbox])
    try:
        yield made
    finally:
        made.remove()
