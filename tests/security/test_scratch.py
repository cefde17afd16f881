"""The kit's scratch attacks (:mod:`stockade.conformance.suite.test_scratch`), and how the
Landlock provider reuses a scratch folder."""

from __future__ import annotations

import os

import pytest

from stockade.conformance.suite.test_scratch import *  # noqa: F403

LEAVE = """
import os, sys
scratch = os.environ["TMPDIR"]
print(scratch, sorted(os.listdir(scratch)))
if sys.argv[1] == "leave":
    open(os.path.join(scratch, "left"), "w").write("x")
"""


@pytest.mark.sandboxes("landlock")
def test_a_scratch_folder_serves_a_later_run_only_when_emptied(host, box):
    """An emptied scratch folder (and the ruleset built for it) serves the next run; one a
    run left something in is removed, and the next run gets a new folder, empty."""
    first = host.run(box.py(LEAVE, "clean"))
    second = host.run(box.py(LEAVE, "leave"))
    third = host.run(box.py(LEAVE, "clean"))
    outputs = [r.stdout.text.split(" ", 1) for r in (first, second, third)]
    assert [r.exit_code for r in (first, second, third)] == [0, 0, 0], third.stderr.text
    assert outputs[0][0] == outputs[1][0] != outputs[2][0], outputs
    assert all(listing == "[]\n" for _, listing in outputs), outputs
    assert not os.path.exists(outputs[1][0])  # removed, with what the run left
