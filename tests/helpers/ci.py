"""What an optional piece of the machine means for a test: skipped here, required in CI.

A developer's machine may lack a browser or an older system ``bwrap``; the test then skips
and says why in the summary. ``.ci/run`` installs them and sets ``STOCKADE_CI=1``, so there
a missing piece fails the run instead of passing it quietly.
"""

from __future__ import annotations

import os

import pytest


def require(present: bool, why: str) -> None:
    """Skip with ``why`` unless ``present``; under CI, fail with it instead."""
    if present:
        return
    if os.environ.get("STOCKADE_CI") == "1":
        pytest.fail(f"{why} (CI must provide it: see .ci/run)")
    pytest.skip(why)
