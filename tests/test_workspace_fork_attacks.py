"""Attacks on forks from outside one (issue 37's review): a command given the folder of
forks, a snapshot's folder of forks, the store's snapshots or the forks' layers (as its
workspace, a grant, a link to one, its working folder) is refused under either sandbox,
before it runs; each attack has a canary (the snapshot's file, a sibling's) and a control
that takes the refusal away and shows the breach the test would see."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stockade.config.schema import Config, store_folder
from stockade.confine import roots
from stockade.errors import UnsafeRoot
from stockade.layers import mounts, snapshots
from stockade.request.spec import ExecRequest

SPOIL = "printf X | dd of={fork}/a.txt conv=notrunc status=none; echo more >> {fork}/b.txt"


@pytest.fixture
def store() -> str:
    return store_folder(Config())


@pytest.fixture
def links(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forks of hard links (a direct writer in place spoils the snapshot through them)."""
    monkeypatch.setattr(mounts, "refusal", lambda store: "asked for links by the test")


def _unguarded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: the refusals taken away (the one of a fork of links too, which caught
    a snapshot's folder of forks, never the folder of forks, under Landlock only)."""
    monkeypatch.setattr(roots, "OWN_FORKS", "no-such-folder")
    monkeypatch.setattr(snapshots, "refuse_holders", lambda *args: None)
    monkeypatch.setattr(snapshots, "refuse_direct", lambda *args: None)


def _where(kind: str, store: str, snap: snapshots.Snapshot, fork: str, tmp: Path) -> str:
    """The folder the attack is given, and the fork's path relative to it."""
    forks = os.path.join(store, snapshots.FORKS)
    folder = {"forks": forks, "snapshot": os.path.dirname(fork), "link": str(tmp / "link")}[kind]
    if kind == "link":
        os.symlink(forks, folder)
    return folder


@pytest.mark.usefixtures("links")
@pytest.mark.parametrize("kind", ["forks", "snapshot", "link"])
@pytest.mark.parametrize("how", ["workspace", "cwd", "grant"])
@pytest.mark.parametrize("guarded", [True, False], ids=["refused", "control"])
def test_a_folder_holding_forks_is_no_writable_root(  # noqa: PLR0917 - parameters
    tmp_path, store, make_host, monkeypatch, kind, how, guarded
):
    source = tmp_path / "source"
    source.mkdir()
    for name in ("a.txt", "b.txt"):
        (source / name).write_text(f"{name}\n")
    snap = snapshots.take(str(source), store=store)
    fork, sibling = snapshots.fork(snap, 2, store=store)
    folder = _where(kind, store, snap, fork, tmp_path)
    rel = os.path.relpath(fork, os.path.join(store, snapshots.FORKS))
    target = rel if kind != "snapshot" else os.path.basename(fork)
    script = SPOIL.format(fork=os.path.join(folder, target))
    other = tmp_path / "other"
    other.mkdir()
    request = {
        "workspace": ExecRequest(["sh", "-c", script], folder, workspace=folder),
        "cwd": ExecRequest(["sh", "-c", script], folder),
        "grant": ExecRequest(
            ["sh", "-c", script],
            str(other),
            workspace=str(other),
            grant_writable=(folder,),
            preapproved=True,
        ),
    }[how]
    if not guarded:
        _unguarded(monkeypatch)
    host = make_host(allow_all=True, config=Config(sandbox="landlock"))
    try:
        if guarded:
            with pytest.raises(UnsafeRoot, match="fork") as refused:
                host.run(request)
            assert refused.value.details["rule"] == "forks"
            # The canaries: the snapshot's file and a sibling's, as they were.
            assert Path(snap.folder, "a.txt").read_text() == "a.txt\n"
            assert Path(sibling, "b.txt").read_text() == "b.txt\n"
        else:
            host.run(request)
            assert Path(snap.folder, "a.txt").read_text() == "X.txt\n"  # the breach
            assert Path(sibling, "b.txt").read_text() == "b.txt\nmore\n"
    finally:
        snapshots.discard(snap, store=store)


@pytest.mark.parametrize("sandbox", ["bubblewrap", "landlock"])
def test_the_stores_snapshots_and_layers_are_no_root_either(tmp_path, store, make_host, sandbox):
    (tmp_path / "a.txt").write_text("a\n")
    snap = snapshots.take(str(tmp_path), store=store)
    fork = snapshots.fork_one(snap, store=store).folder
    host = make_host(allow_all=True, config=Config(sandbox=sandbox))
    layers = os.path.join(store, mounts.LAYERS)
    os.makedirs(layers, exist_ok=True)
    try:
        forks = os.path.join(store, snapshots.FORKS)
        for folder in (forks, os.path.dirname(fork), snap.folder, layers, store):
            with pytest.raises(UnsafeRoot):
                host.run(
                    ExecRequest(
                        ["true"], fork, workspace=fork, grant_writable=(folder,), preapproved=True
                    )
                )
        for folder in (forks, os.path.dirname(fork)):  # landing there is refused too
            with pytest.raises(UnsafeRoot, match="fork"):
                host.run(ExecRequest(["touch", "x"], folder, workspace=folder))
        assert Path(snap.folder, "a.txt").read_text() == "a\n"
    finally:
        snapshots.discard(snap, store=store)


def test_holds_forks_names_the_class(tmp_path, store):
    forks = os.path.join(store, snapshots.FORKS)
    snap = os.path.join(forks, "snap-00")
    fork = os.path.join(snap, "abcd")
    os.makedirs(os.path.join(fork, "sub"))
    link = tmp_path / "to-snap"
    link.symlink_to(snap)
    holding = (forks, snap, str(link), os.path.dirname(forks), store, os.path.dirname(store))
    for folder in (*holding, os.path.join(store, "snapshots", "x"), os.path.join(store, "forks")):
        assert snapshots.holds_forks(folder, store=store), folder
    for folder in (fork, os.path.join(fork, "sub"), str(tmp_path)):
        assert not snapshots.holds_forks(folder, store=store), folder
    rules = roots.RootRules(homes=(), stores=(os.path.realpath(store),))
    for folder in (forks, snap, str(link)):
        assert rules.refusal(os.path.realpath(folder)) is not None, folder
    assert rules.refusal(os.path.realpath(fork)) is None
    os.rmdir(os.path.join(fork, "sub"))
    os.rmdir(fork)
    os.rmdir(snap)
