"""Snapshots and forks (:mod:`stockade.layers.snapshots`): the docs' example runs; forks
of hard links (what is made where no overlay can be mounted: forced here, so the tests hold
as root too; overlay forks: ``test_workspace_overlay_forks.py``) share the snapshot's files
and stay apart; a command that would write a fork in place
(Landlock) is refused; export and discard; forks made and removed while a command runs in a
sibling are not taken for changes to its files."""

from __future__ import annotations

import importlib.util
import io
import os
import secrets
import tarfile
import threading
from pathlib import Path

import pytest

from stockade.config.schema import Config, store_folder
from stockade.conformance.procs import sleeping, wait_until
from stockade.errors import SandboxUnavailable, UsageError
from stockade.layers import mounts, snapshots
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


@pytest.fixture
def links(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forks of hard links, as where no overlay can be mounted."""
    monkeypatch.setattr(mounts, "refusal", lambda store: "asked for links by the test")


@pytest.mark.usefixtures("links")
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


@pytest.mark.usefixtures("links")
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


@pytest.mark.usefixtures("links")
def test_forks_made_and_removed_while_one_runs_are_no_conflict(tmp_path, make_host):
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "b.txt").write_text("b")
    store = store_folder(Config())
    snap = snapshots.take(str(tmp_path), store=store)
    first, gone = snapshots.fork(snap, 2, store=store)
    host = make_host(allow_all=True, config=Config(sandbox="bubblewrap"))
    # Changes both files two seconds after it starts; meanwhile a sibling fork is made and
    # one removed (each adds or drops a link to the shared files: their change time moves),
    # and b.txt is replaced in the fork itself (a real rival change: a conflict, the control).
    marker = f"{31 + secrets.randbelow(10**6) / 10**6:.6f}"
    script = f"sleep {marker} & sleep 2; echo mine > a.txt; echo mine > b.txt"
    results = {}
    run = ExecRequest(["sh", "-c", script], first, workspace=first)
    ran = threading.Thread(target=lambda: results.update(r=host.run(run)))
    ran.start()
    assert wait_until(lambda: sleeping(marker), 60)  # it runs: what follows is after its start
    snapshots.fork(snap, 1, store=store)
    snapshots.discard_fork(gone, store=store)
    (Path(first) / "b.new").write_text("rival")
    os.replace(Path(first) / "b.new", Path(first) / "b.txt")
    ran.join(60)
    result = results["r"]
    assert result.conflicts == (str(Path(first) / "b.txt"),)  # the rival's change is seen
    assert (Path(first) / "a.txt").read_text() == "mine\n"  # the link churn is not
    assert (Path(first) / "b.txt").read_text() == "rival"
    assert (Path(snap.folder) / "a.txt").read_text() == "a"  # the snapshot keeps its own
    snapshots.discard(snap, store=store)
