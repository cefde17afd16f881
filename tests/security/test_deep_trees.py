"""A command makes a folder tree of any depth (each folder from its parent's descriptor, so
``PATH_MAX`` never limits it), and the host's walks of what it wrote must not crash on it:
the policy's private check before every step (:func:`stockade.policy.private._with_links`,
:mod:`stockade.policy.walk`), the landing of a layer, and the removal of the run's scratch.

Python 3.11's :func:`os.walk` and :func:`shutil.rmtree` are recursive: on such a tree they
raise ``RecursionError``, which ``ignore_errors`` does not catch, so before the fix a deep
tree in a workspace holding a hard link to a private file made every later step of every
run crash. The control in each test shows the tree is deep enough to make them raise.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stockade.config.schema import store_folder
from stockade.layers import journal, place

from .conftest import PYTHON
from .test_breaker import config, taints

DEPTH = 3_000
MIDDLE = 1_000
"""Where the host-made tree holds its hard links (``d/`` 1,000 times: a path still names them)."""

MAKE_DEEP = """
import os, sys
top, outside = sys.argv[1] or os.environ["TMPDIR"], sys.argv[2]  # "": the scratch
os.makedirs(top, exist_ok=True)
fd, depth = os.open(top, os.O_RDONLY), 0
while depth < int(sys.argv[3]):
    try:
        os.mkdir("d", dir_fd=fd)
    except OSError:  # Landlock's supervisor names what it judges by path: PATH_MAX bounds it
        break
    inner = os.open("d", os.O_RDONLY, dir_fd=fd); os.close(fd); fd, depth = inner, depth + 1
    if depth % 500 == 0:  # a file, and a link out a removal must not follow
        os.close(os.open("leaf", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
        os.symlink(outside, "out", dir_fd=fd)
print(os.path.realpath(top), depth)
"""
DEEP_ENOUGH = 1_500
"""Deeper than any recursive walk of Python 3.11 goes (its recursion limit is 1,000)."""


def _deep(top: Path, links: dict[str, Path]) -> None:
    """A tree ``DEPTH`` deep under ``top``, with hard links ``links`` (name: target) in the
    ``MIDDLE`` folder, made as a command makes it: from each parent's descriptor."""
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(1, DEPTH + 1):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
            if level == MIDDLE:
                for name, target in links.items():
                    os.link(target, name, dst_dir_fd=fd)
    finally:
        os.close(fd)


@pytest.fixture
def planted(box):
    ws = box.ws
    (ws / "private").mkdir()
    notes = ws / "private" / "notes.txt"
    notes.write_text(box.canary + "\n")
    (ws / "a.pem").write_text(box.canary + "\n")
    (ws / "readme.txt").write_text("somebody else's words\n")
    (ws / "out").mkdir()  # no carve-out beneath: Landlock lets a command make folders there
    os.link(notes, ws / "hard-before")
    _deep(ws / "deep", {"hard": notes, "key.pem": ws / "a.pem"})
    return ws


def test_a_deep_tree_in_the_workspace_never_stops_the_private_check(
    make_host, box, planted
) -> None:
    with pytest.raises(RecursionError):  # the control: the walk the check used before
        list(os.walk(planted))
    host = make_host(config=config(box, 9, private=("private/*", "*.pem")))
    middle = "deep/" + "d/" * MIDDLE
    argv = ["cat", "readme.txt", "hard-before", middle + "hard", middle + "key.pem"]
    result = host.run(box.request(argv, profile="a", preapproved=True))
    assert "somebody else's words" in result.stdout.text, result.stderr.text  # cat ran
    assert box.canary not in result.stdout.text  # both hard links masked, deep or not
    assert not [t for t in taints(host) if t[0] == "private"]
    # A command adds a deep tree of its own, with a link out: the next step runs as well.
    made = host.run(
        box.request(
            [PYTHON, "-S", "-c", MAKE_DEEP, "out/made", str(box.outside), str(DEPTH)],
            profile="a",
            preapproved=True,
        )
    )
    assert made.exit_code == 0, made.stderr.text
    assert int(made.stdout.text.split()[-1]) >= DEEP_ENOUGH, made.stdout.text
    again = host.run(box.request(argv, profile="a", preapproved=True))
    assert "somebody else's words" in again.stdout.text, again.stderr.text
    assert box.canary not in again.stdout.text
    assert box.secret.read_text() == box.canary  # nothing followed the link out
    layers = os.path.join(store_folder(host.config), place.LAYERS)
    if os.path.isdir(layers):  # a layered run: its layer, deep tree and all, is gone
        assert os.listdir(layers) == [journal.JOURNAL]


@pytest.mark.sandboxes("landlock")
def test_the_landlock_scratch_of_a_deep_tree_is_removed_when_the_run_ends(make_host, box) -> None:
    host = make_host(config=config(box, 9))
    argv = [PYTHON, "-S", "-c", MAKE_DEEP, "", str(box.outside), str(DEPTH)]
    tmp = host.run(box.request(argv, profile="a", preapproved=True))
    assert tmp.exit_code == 0, tmp.stderr.text
    scratch, depth = tmp.stdout.text.split()
    assert int(depth) >= DEEP_ENOUGH
    assert scratch and scratch.startswith("/") and not scratch.startswith(str(box.ws)), scratch
    assert not os.path.lexists(scratch)  # given back emptied: removed, however deep
    assert box.secret.read_text() == box.canary
    assert sorted(os.listdir(box.outside)) == ["secret.txt"]
