"""Attackers that race the host: shipped with the kit's attacks, which may start processes
(the suite's folder is where the project's layout lets tests in core start them)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

_FLIP = """\
import os, sys
link, targets = sys.argv[1], sys.argv[2:]
while True:
    for target in targets:
        os.symlink(target, link + ".flip")
        os.replace(link + ".flip", link)
"""


@contextlib.contextmanager
def flipping(link: Path, targets: Sequence[str]) -> Iterator[None]:
    """While the block runs, another process swaps the symlink ``link`` between ``targets``
    as fast as it can: an attacker racing a check of a path and its use."""
    flipper = subprocess.Popen(
        [sys.executable, "-c", _FLIP, str(link), *targets], stdout=subprocess.DEVNULL
    )
    try:
        yield
    finally:
        flipper.kill()
        flipper.wait()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{link}.flip")
