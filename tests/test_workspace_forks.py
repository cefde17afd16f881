"""Snapshots and forks (:mod:`stockade.layers.snapshots`): the docs' example runs; forks
share the snapshot's files and stay apart; a command that would write a fork in place
(Landlock) is refused; export and discard."""

from __future__ import annotations

import importlib.util
import io
import os
import tarfile
from pathlib import Path

import pytest

from stockade.config.schema import Config, store_folder
from stockade.errors import SandboxUnavailable, UsageError
from stockade.layers import snapshots
from stockade.request.spec import ExecRequest

EXAMPLE = Path(__file__).parents[1] / "docs" / "examples" / "forks.py"


def _example():
    spec = importlib.util.spec_from_file_location("forks_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_example_forks_and_runs(tmp_path):
    (tmp_path / "seed.txt").write_text("seed")
    lines = _example().rollouts(str(tmp_path), 3)
    assert lines == [*["result.txt seed.txt"] * 3, "snapshot: seed.txt"]
    assert sorted(os.listdir(tmp_path)) == ["seed.txt"]  # the source is untouched


def test_forks_share_files_yet_stay_apart(tmp_path, make_host):
    (tmp_path / "a.txt").write_text("a")
    store = store_folder(Config())
    snap = snapshots.take(str(tmp_path), store=store)
    first, second = snapshots.fork(snap, 2, store=store)
    inode = os.stat(Path(snap.folder) / "a.txt").st_ino
    assert os.stat(Path(first) / "a.txt").st_ino == inode  # shared, not copied
    host = make_host(allow_all=True, config=Config(sandbox="bubblewrap"))
    write = ExecRequest(["sh", "-c", "echo changed > a.txt"], first, workspace=first)
    assert host.run(write).landed == "landed"
    assert (Path(first) / "a.txt").read_text() == "changed\n"
    assert (Path(second) / "a.txt").read_text() == "a"  # the sibling and the snapshot keep it
    assert (Path(snap.folder) / "a.txt").read_text() == "a"
    assert snapshots.get(snap.id, store=store).folder == snap.folder
    stream = io.BytesIO()
    snapshots.export(snap, stream)
    stream.seek(0)
    with tarfile.open(fileobj=stream) as tar:
        assert tar.extractfile("a.txt").read() == b"a"  # type: ignore[union-attr]
    snapshots.discard_fork(first, store=store)
    assert snapshots.forks(snap, store=store) == (second,)
    with pytest.raises(UsageError):
        snapshots.discard_fork(str(tmp_path), store=store)
    snapshots.discard(snap, store=store)
    assert not os.path.exists(second) and not os.path.exists(snap.folder)
    with pytest.raises(UsageError):
        snapshots.get(snap.id, store=store)


def test_a_command_that_would_write_a_fork_in_place_is_refused(tmp_path, make_host):
    (tmp_path / "a.txt").write_text("a")
    store = store_folder(Config())
    snap = snapshots.take(str(tmp_path), store=store)
    (fork,) = snapshots.fork(snap, 1, store=store)
    host = make_host(allow_all=True, config=Config(sandbox="landlock"))
    write = ExecRequest(["sh", "-c", "echo changed > a.txt"], fork, workspace=fork)
    with pytest.raises(SandboxUnavailable, match="fork"):
        host.run(write)
    assert (Path(snap.folder) / "a.txt").read_text() == "a"
    ok = host.run(ExecRequest(["sh", "-c", "echo changed > a.txt"], str(tmp_path)))
    assert ok.ok  # the control: an ordinary folder runs under Landlock
