"""The kit's quota attacks (:mod:`stockade.conformance.suite.test_quota`), on both providers;
and what only the host does: a workspace over its quota takes no more, from a command or the
file tools, until something is removed."""

from __future__ import annotations

import pytest

from stockade.conformance.suite.test_quota import *  # noqa: F403
from stockade.conformance.suite.test_quota import FLOOD, _agent
from stockade.errors import StockadeError
from stockade.run.quota import MIB, usage
from stockade.workspace.files import Workspace


def test_a_workspace_over_its_quota_takes_no_more_until_something_is_removed(box, make_host):
    (box.ws / "filler").write_bytes(b"\1" * (9 * MIB))  # over the 8 MiB quota already
    assert usage(str(box.ws)) > 8 * MIB
    host = _agent(box, make_host, quota_mb=8)
    grow = host.run(box.py(FLOOD, "more", "1", profile="bot"))
    assert grow.limit_hit == "quota" and not grow.ok
    with Workspace(str(box.ws), quota_mb=8) as workspace, pytest.raises(StockadeError) as error:
        workspace.file_write("note.txt", "x" * 1000)
    assert error.value.code == "quota_exceeded"
    assert "quota" in error.value.message and not (box.ws / "note.txt").exists()
    # Removing is always allowed, and then writes fit again.
    (box.ws / "more").unlink(missing_ok=True)
    removed = host.run(box.request(["rm", "filler"], profile="bot"))
    assert removed.ok and removed.limit_hit is None, removed.stderr.text
    with Workspace(str(box.ws), quota_mb=8) as workspace:
        assert workspace.file_write("note.txt", "fits").changed
