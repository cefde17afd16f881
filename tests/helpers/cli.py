"""The ``stockade`` command line as the tests run it: a child of this interpreter, its
output captured as text, its exit status left for the test to judge."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from stockade.testing import CLI as _CLI

CLI = [*_CLI]  # the native client when the session runs through the server


def stockade(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``stockade ARGS`` run in ``cwd`` with ``env`` (this process's when ``None``)."""
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        env=dict(os.environ if env is None else env),
        cwd=cwd,
    )
