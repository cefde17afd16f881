"""The breaker's private-file marks reach a snapshot's forks (issue 37's review): a file a
run wrote while it held private data is marked in the sidecar by the workspace's real path;
a fork is another path, so without the carry a command in a fork read the file the source
refused, untainted. The canary is the fork's mark, which the breaker looks up when a
command reads there (``Breaker._private``); the control takes the carry away and sees the
fork unmarked."""

from __future__ import annotations

import os
import shutil

import pytest

from stockade.config.schema import Config, store_folder
from stockade.layers import marks, mounts, snapshots


def _marked(source, make_host):
    """A workspace with one file a private run wrote (marked) and one plain; its sidecar."""
    (source / "derived.txt").write_text("made from a private file\n")
    (source / "plain.txt").write_text("nothing\n")
    files = make_host(allow_all=True).breaker.files()
    files.mark(os.path.realpath(source), ["derived.txt"], run_id="r-private", step=3)
    return files


@pytest.mark.parametrize("method", ["links", "overlay"])
@pytest.mark.parametrize("carry", ["carried", "control"])
def test_a_forks_files_stay_marked_private(tmp_path, make_host, monkeypatch, method, carry):
    if method == "overlay" and os.geteuid() != 0:
        pytest.skip("an overlay fork is root's")
    store = store_folder(Config())
    files = _marked(tmp_path, make_host)
    if carry == "control":
        monkeypatch.setattr(marks, "give", lambda *args, **kwargs: 0)
    snap = snapshots.take(str(tmp_path), store=store)
    made = snapshots.fork_one(snap, store=store, overlay=method == "overlay")
    assert made.method == method or (method == "overlay" and mounts.refusal(store))
    try:
        found = files.named(os.path.realpath(made.folder), [""])
        if carry == "carried":
            assert found == ["derived.txt"]  # the canary
            assert files.rows(os.path.realpath(made.folder)) == [("derived.txt", "r-private", 3)]
        else:
            assert found == []  # the breach: the fork's copy reads untainted
    finally:
        snapshots.discard(snap, store=store)
    assert not os.path.exists(f"{snap.folder}.private")


@pytest.mark.parametrize(
    ("method", "how"),  # a lost overlay fork keeps its layer: it is copied again, not made
    [("links", "discarded"), ("overlay", "discarded"), ("links", "lost")],  # at its path
)
def test_a_gone_forks_marks_go_with_it(tmp_path, make_host, method, how):
    """A fork discarded (or lost with its disk, then made again at its path) leaves none of
    its own marks: the fork made again there starts with the snapshot's alone. The
    control: the marks are there while the fork is."""
    if method == "overlay" and os.geteuid() != 0:
        pytest.skip("an overlay fork is root's")
    store = store_folder(Config())
    files = _marked(tmp_path, make_host)
    snap = snapshots.take(str(tmp_path), store=store)
    try:
        made = snapshots.fork_one(snap, store=store, overlay=method == "overlay")
        fork = os.path.realpath(made.folder)
        files.mark(fork, ["plain.txt"], run_id="r-fork", step=1)  # written there, privately
        assert files.named(fork, [""]) == ["derived.txt", "plain.txt"]  # the control
        if how == "discarded":
            snapshots.discard_fork(made.folder, store=store)
            assert files.rows(fork) == []
            return
        shutil.rmtree(made.folder)  # lost with its disk: nothing was discarded
        assert files.named(fork, [""]) == ["derived.txt", "plain.txt"]
        again = snapshots.fork_one(snap, store=store, overlay=method == "overlay", at=fork)
        assert os.path.realpath(again.folder) == fork
        assert files.rows(fork) == [("derived.txt", "r-private", 3)]  # the snapshot's alone
        assert (tmp_path / "plain.txt").read_text() == "nothing\n"
    finally:
        snapshots.discard(snap, store=store)
