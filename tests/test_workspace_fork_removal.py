"""Removing forks and layers safely (issue 37's review): a tree is removed by descriptors,
so a folder swapped for a link mid-walk never has root change what the link names; a busy
fork's detached upper stays until no process uses it (the sweep removes it then); discard
follows no link put in place of a snapshot's folder of forks or of a fork. Each attack has
a canary (a victim folder's modes, an unrelated overlay) and a control showing the breach
(the old path-based walk, the old resolving discard)."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from stockade import trees
from stockade.config.schema import Config, store_folder
from stockade.conformance.procs import wait_until
from stockade.errors import UsageError
from stockade.layers import mounts, snapshots

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="an overlay fork is root's")


@pytest.fixture
def store() -> str:
    return store_folder(Config())


def _by_path(folder: str) -> None:
    """The control: the walk ``remove_tree`` made before (by path)."""
    for directory, folders, _ in os.walk(folder):
        for name in folders:
            with contextlib.suppress(OSError):
                path = os.path.join(directory, name)
                if not os.path.islink(path):
                    os.chmod(path, 0o700)
    shutil.rmtree(folder, ignore_errors=True)


def _victim(tmp: Path) -> Path:
    victim = tmp / "victim"
    (victim / "inner").mkdir(parents=True)
    (victim / "inner" / "kept.txt").write_text("canary\n")
    for folder in (victim, victim / "inner"):
        os.chmod(folder, 0o755)  # noqa: S103 - the canary's modes
    return victim


def _intact(victim: Path) -> bool:
    modes = [stat.S_IMODE(os.stat(f).st_mode) for f in (victim, victim / "inner")]
    return modes == [0o755] * 2 and (victim / "inner" / "kept.txt").read_text() == "canary\n"


@pytest.mark.parametrize("remove", ["descriptors", "control"])
def test_a_folder_swapped_for_a_link_mid_removal_is_not_followed(tmp_path, monkeypatch, remove):
    victim = _victim(tmp_path)
    top = tmp_path / "layer"
    (top / "d" / "inner").mkdir(parents=True)
    swapped = []
    chmod, islink = os.chmod, os.path.islink

    def race(path: str) -> None:  # the command's `mv d old; ln -s VICTIM d`, just then
        named = os.readlink(path) if str(path).startswith("/proc/self/fd/") else str(path)
        if named == str(top / "d") and not swapped:
            os.rename(top / "d", top / "old")
            os.symlink(victim, top / "d")
            swapped.append(named)

    def checked(path):  # the swap lands between a check and its use
        found = islink(path)
        race(path)
        return found

    def changed(path, mode, **kwargs):
        chmod(path, mode, **kwargs)
        race(path)

    monkeypatch.setattr(os, "chmod", changed)
    monkeypatch.setattr(os.path, "islink", checked)
    (trees.remove_tree if remove == "descriptors" else _by_path)(str(top))
    monkeypatch.undo()
    assert swapped  # the race was run
    if remove == "descriptors":
        assert _intact(victim)  # the canary
        assert not top.exists()
    else:
        assert not _intact(victim)  # the breach: root chmodded the victim 0700


def test_remove_tree_removes_a_link_not_what_it_names(tmp_path):
    victim = _victim(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(victim)
    trees.remove_tree(str(link))
    assert not os.path.lexists(link)
    assert _intact(victim)
    locked = tmp_path / "locked" / "deep"
    locked.mkdir(parents=True)
    (locked / "f").write_text("x")
    os.chmod(locked, 0)
    os.chmod(locked.parent, 0)
    trees.remove_tree(str(tmp_path / "locked"))  # a command took its own rights away
    assert not (tmp_path / "locked").exists()


@pytest.fixture
def links(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mounts, "refusal", lambda store: "asked for links by the test")


@pytest.mark.usefixtures("links")
@pytest.mark.parametrize("discard", ["checked", "control"])
def test_discard_follows_no_link_put_for_a_snapshots_forks(tmp_path, store, monkeypatch, discard):
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / "a.txt").write_text("a\n")
    snap = snapshots.take(str(tmp_path / "source"), store=store)
    fork = snapshots.fork_one(snap, store=store).folder
    victim = _victim(tmp_path)
    folder = os.path.dirname(fork)
    os.rename(folder, folder + "-moved")  # `mv snap-ID moved; ln -s /elsewhere snap-ID`
    os.symlink(victim, folder)
    if discard == "control":
        monkeypatch.setattr(snapshots, "_folder", os.path.realpath)  # as it resolved before
        snapshots.discard(snap, store=store)
        assert not victim.exists()  # the breach: the link's target removed
        return
    with pytest.raises(UsageError, match="not a folder"):
        snapshots.discard(snap, store=store)
    assert _intact(victim)  # the canary
    with pytest.raises(UsageError, match="not a fork"):
        snapshots.discard_fork(os.path.join(folder, os.path.basename(fork)), store=store)
    os.unlink(folder)
    os.rename(folder + "-moved", folder)
    snapshots.discard(snap, store=store)
    assert not os.path.exists(folder)


def _old_drop(point: str, store: str) -> bool:
    """The control: ``_drop`` as it was (its argument resolved, every mount beneath it)."""
    real = os.path.realpath(point)
    for inner in mounts.overlays_beneath(real):
        mounts.unmount(inner)
    trees.remove_tree(point)
    return False


@ROOT_ONLY
@pytest.mark.parametrize("discard", ["checked", "control"])
def test_discard_unmounts_no_overlay_a_link_leads_to(tmp_path, store, monkeypatch, discard):
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / "a.txt").write_text("a\n")
    snap = snapshots.take(str(tmp_path / "source"), store=store)
    fork = snapshots.fork_one(snap, store=store).folder
    unrelated = tmp_path / "elsewhere"
    parts = [unrelated / n for n in ("lower", "upper", "work", "merged")]
    for part in parts:
        part.mkdir(parents=True)
    mounts.mount(*(str(p) for p in parts))
    try:
        folder = os.path.dirname(fork)
        moved = folder + "-moved"
        os.rename(folder, moved)
        os.symlink(unrelated, folder)
        if discard == "control":
            monkeypatch.setattr(snapshots, "_drop", _old_drop)
            with contextlib.suppress(OSError, UsageError):
                snapshots.discard(snap, store=store)
            assert not mounts.is_overlay(str(parts[3]))  # the breach: unmounted
            return
        with pytest.raises(UsageError):
            snapshots.discard(snap, store=store)
        assert mounts.is_overlay(str(parts[3]))  # the canary: still mounted
        os.unlink(folder)
        os.rename(moved, folder)
        snapshots.discard(snap, store=store)
        assert not mounts.overlays_beneath(os.path.realpath(store))
    finally:
        mounts.unmount(str(parts[3]))
        for point in mounts.overlays_beneath(os.path.realpath(store)):
            mounts.unmount(point)


@ROOT_ONLY
@pytest.mark.parametrize("sweep", ["waits", "control"])
def test_a_busy_forks_layer_stays_until_no_process_uses_it(tmp_path, store, monkeypatch, sweep):
    (tmp_path / "a.txt").write_text("a\n")
    snap = snapshots.take(str(tmp_path), store=store)
    fork = snapshots.fork_one(snap, store=store).folder
    layer = Path(store, mounts.LAYERS, snap.id, os.path.basename(fork))
    if sweep == "control":
        monkeypatch.setattr(mounts, "in_use", lambda device: False)
    writer = subprocess.Popen(  # a command still in the fork, its file open
        ["sh", "-c", "exec 3>>w.txt; echo x >&3; exec sleep 60"], cwd=fork
    )
    wait_until(lambda: Path(fork, "w.txt").exists())
    try:
        snapshots.discard_fork(fork, store=store)  # detached lazily
        assert not os.path.exists(fork)
        gone = Path(f"{layer}.gone")
        if sweep == "control":
            assert not gone.exists()  # the breach: removed while still written
            return
        assert (gone / "upper" / "w.txt").read_text() == "x\n"  # the canary: left as it is
        snapshots.sweep(store)
        assert gone.exists()
    finally:
        writer.kill()
        writer.wait()
    snapshots.sweep(store)
    assert not Path(f"{layer}.gone").exists() and not Path(f"{layer}.busy").exists()
    snapshots.discard(snap, store=store)
    assert not os.path.exists(Path(store, mounts.LAYERS, snap.id))


KILLED = """
import os, signal, sys
from stockade.layers import snapshots
snap = snapshots.take(sys.argv[1], store=sys.argv[2])
print(snapshots.fork_one(snap, store=sys.argv[2]).folder, snap.id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@ROOT_ONLY
def test_the_forks_a_killed_process_left_mounted_are_found_and_discarded(tmp_path, store):
    (tmp_path / "a.txt").write_text("a\n")
    done = subprocess.run(
        [sys.executable, "-c", KILLED, str(tmp_path), store],
        capture_output=True,
        text=True,
        check=False,
    )
    fork, snap_id = done.stdout.split()
    assert mounts.is_overlay(fork)  # killed with its fork whole: the sweep leaves it
    assert snapshots.sweep(store) == []
    assert snapshots.mounted(store) == (os.path.realpath(fork),)
    for left in snapshots.mounted(store):
        snapshots.discard_fork(left, store=store)
    assert not snapshots.mounted(store) and not os.path.exists(fork)
    snapshots.discard(snapshots.get(snap_id, store=store), store=store)
