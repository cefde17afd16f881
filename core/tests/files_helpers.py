"""What ``test_files_escapes.py`` and ``test_files_tools.py`` share: which resolvers this kernel
has (the ``resolver`` fixture in conftest.py runs a test with each), and a tool's outcome."""

from __future__ import annotations

import os

import pytest

from stockade.errors import StockadeError
from stockade.workspace import files


def _has_openat2() -> bool:
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        return files.openat2_available(fd)
    finally:
        os.close(fd)


HAS_OPENAT2 = _has_openat2()
RESOLVERS = [
    pytest.param("openat2", marks=pytest.mark.skipif(not HAS_OPENAT2, reason="no openat2 here")),
    "walk",
]


def _outcome(call, *args, **kwargs):
    """The tool's result, or ``None`` when it refused with a typed error."""
    try:
        return call(*args, **kwargs)
    except StockadeError:
        return None
