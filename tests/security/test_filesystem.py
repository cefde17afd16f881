"""The kit's file attacks (:mod:`stockade.conformance.suite.test_filesystem`), and a setting
of the project's two providers."""

from __future__ import annotations

import pytest

from stockade.conformance.suite.test_filesystem import *  # noqa: F403
from stockade.errors import SandboxUnavailable


def test_a_workspace_too_large_to_scan_is_refused(make_host, box):
    from stockade.config.schema import Config, PluginsConfig

    settings = {box.sandbox: {"scan_limit": 5}}
    config = Config(sandbox=box.sandbox, plugins=PluginsConfig(settings=settings))
    host = make_host(allow_all=True, config=config)
    for i in range(10):
        (box.ws / f"d{i}").mkdir()
    with pytest.raises(SandboxUnavailable, match=r"scan_limit|more than 5"):
        host.run(box.py("print('ran')"))
