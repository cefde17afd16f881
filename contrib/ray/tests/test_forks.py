"""Forks unpack a snapshot without ever writing outside the fork: archives naming ``..``,
an absolute path, a hard link or a device are refused, and a link is never written through
(a file below a link's name lands in a real folder, and the link is then refused), where
the same archive without the trick unpacks whole (the control). Exports keep binary files
whole and name what changed. As root, forks are overlays over one layers' snapshot made on
the node once, for any sandbox, and a dead pool's are discarded when a pool starts; without
an overlay, where a node's steps write through layers, forks are hard links to it; where
they would write directly, a copy that says why."""

from __future__ import annotations

import asyncio
import io
import os
import secrets
import tarfile
from pathlib import Path

import pytest
from ground import Box

from stockade.config.schema import Config, PluginsConfig, StoreConfig
from stockade.errors import UsageError
from stockade.layers import mounts, snapshots

pytest.importorskip("ray")  # optional (see conftest.py)

from stockade_ray.forks import TooLarge, export, manifest, pack, unpack
from stockade_ray.layered import LayeredSnapshots, forget_pool
from stockade_ray.worker import Worker

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="an overlay fork is root's")


def _archive(*members: tuple[str, bytes | str | None, bytes]) -> bytes:
    """Members as (name, kind, content): kind ``b"f"`` a file, ``b"d"`` a folder, ``b"l"``
    a link to ``content``, ``b"h"`` a hard link to it, ``b"c"`` a character device."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, kind, content in members:
            info = tarfile.TarInfo(name)
            if kind == b"f":
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
                continue
            info.type = {
                b"d": tarfile.DIRTYPE,
                b"l": tarfile.SYMTYPE,
                b"h": tarfile.LNKTYPE,
                b"c": tarfile.CHRTYPE,
            }[kind]  # type: ignore[index]
            info.linkname = content.decode()
            tar.addfile(info)
    return out.getvalue()


@pytest.mark.parametrize(
    "member",
    [
        ("../escape.txt", b"f", b"x"),
        ("/tmp/escape.txt", b"f", b"x"),
        ("a/../../escape.txt", b"f", b"x"),
        ("hard", b"h", b"/etc/passwd"),
        ("null", b"c", b""),
    ],
)
def test_a_trick_member_is_refused(tmp_path: Path, member: tuple[str, bytes, bytes]) -> None:
    good = _archive(("ok.txt", b"f", b"fine"))
    assert unpack(good, str(tmp_path / "control")) == 1  # the control unpacks
    with pytest.raises(UsageError):
        unpack(_archive(("ok.txt", b"f", b"fine"), member), str(tmp_path / "fork"))
    assert not (tmp_path / "escape.txt").exists()


def test_a_link_is_never_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    trick = _archive(("link", b"l", str(outside).encode()), ("link/evil.txt", b"f", b"x"))
    with pytest.raises(FileExistsError):
        unpack(trick, str(tmp_path / "fork"))
    assert list(outside.iterdir()) == []
    assert (tmp_path / "fork" / "link" / "evil.txt").read_bytes() == b"x"  # a real folder
    kept = _archive(("f.txt", b"f", b"x"), ("up", b"l", b".."))
    unpack(kept, str(tmp_path / "fork2"))  # links themselves are kept, as links
    assert (tmp_path / "fork2" / "up").is_symlink()


def test_a_snapshot_round_trips_and_exports_its_changes(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "sub").mkdir(parents=True)
    blob = bytes(range(256)) * 1000
    (source / "sub" / "blob.bin").write_bytes(blob)
    (source / "gone.txt").write_text("bye")
    fork = tmp_path / "fork"
    unpack(pack(str(source), cap=10**7), str(fork))
    base = manifest(str(fork))
    assert (fork / "sub" / "blob.bin").read_bytes() == blob
    (fork / "gone.txt").unlink()
    (fork / "new.txt").write_text("hi")
    changed = export(str(fork), cap=10**7, base=base)
    assert changed.files == ("new.txt",) and changed.deleted == ("gone.txt",)
    with pytest.raises(TooLarge):
        export(str(fork), cap=1000)


def _worker(store: Path, *, layers: bool = True) -> Worker:
    settings = {} if layers else {"bubblewrap": {"layers": False}}
    config = Config(store=StoreConfig(path=str(store / "store.db")),
                    plugins=PluginsConfig(settings=settings))  # fmt: skip
    return Worker(config, "run-forks-" + secrets.token_hex(4), {})


def _tree(folder: Path, files: int) -> None:
    for i in range(files):
        (folder / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (folder / f"d{i % 3}" / f"f{i}.txt").write_text(f"file {i}\n")


@pytest.fixture
def links(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forks of hard links, as where no overlay can be mounted (unprivileged)."""
    monkeypatch.setattr(mounts, "refusal", lambda store: "asked for links by the test")


@pytest.mark.usefixtures("links")
def test_forks_from_layers_share_one_snapshot_and_copies_say_why(box: Box) -> None:
    _tree(box.ws, 30)
    snap = LayeredSnapshots().take(str(box.ws), cap=10**7)
    worker = _worker(box.root / "state")
    try:
        first, second = (asyncio.run(worker.seed(str(box.root / n), snap, LayeredSnapshots()))
                         for n in ("a", "b"))  # fmt: skip
        assert first.method == second.method == "layers", first.why
        assert first.why == "asked for links by the test"
        assert first.base == second.base and first.workspace != second.workspace
        # No copy: each fork's file is the node snapshot's own (made once, for both).
        inode = os.stat(Path(first.base) / "d0" / "f0.txt").st_ino
        assert os.stat(Path(first.workspace) / "d0" / "f0.txt").st_ino == inode
        assert os.stat(Path(second.workspace) / "d0" / "f0.txt").st_ino == inode
        assert sorted(manifest(first.workspace)) == sorted(manifest(str(box.ws)))
        # A kept fork keeps its snapshot when the pool goes; none left, it goes too.
        store = str(box.root / "state")
        assert forget_pool(store, worker.doer.run_id) == [Path(first.base).name]
        for fork in (first, second):
            worker.forget("x", fork.workspace, remove=True)
        assert forget_pool(store, worker.doer.run_id) == []
        assert not os.path.exists(first.base)
    finally:
        worker.close()
    # Where this node's steps would write directly, the fork is a copy, saying why.
    direct = _worker(box.root / "direct", layers=False)
    try:
        copied = asyncio.run(direct.seed(str(box.root / "c"), snap, LayeredSnapshots()))
        assert copied.method == "copy" and "directly" in copied.why, copied
        assert "asked for links by the test" in copied.why
        assert copied.workspace == str(box.root / "c") and copied.files == 30
        inode = os.stat(box.ws / "d0" / "f0.txt").st_ino
        assert os.stat(box.root / "c" / "d0" / "f0.txt").st_ino != inode
    finally:
        direct.close()


@ROOT_ONLY
def test_overlay_forks_serve_any_sandbox_export_their_changes_and_unmount(box: Box) -> None:
    _tree(box.ws, 30)
    snap = LayeredSnapshots().take(str(box.ws), cap=10**7)
    # Steps that write directly (no layers) may run in an overlay fork: no copy needed.
    worker = _worker(box.root / "state", layers=False)
    store = str(box.root / "state")
    try:
        forked = asyncio.run(worker.seed(str(box.root / "a"), snap, LayeredSnapshots()))
        assert (forked.method, forked.why) == ("overlay", "")
        assert mounts.is_overlay(forked.workspace)
        ws = Path(forked.workspace)
        (ws / "d0" / "f0.txt").unlink()
        (ws / "d1" / "f1.txt").write_text("changed\n")
        (ws / "new.bin").write_bytes(bytes(range(256)))
        changed = worker.export(forked.workspace, 10**7, True)
        assert sorted(changed.files) == ["d1/f1.txt", "new.bin"]
        assert changed.deleted == ("d0/f0.txt",)
        assert (Path(forked.base) / "d0" / "f0.txt").exists()  # the snapshot keeps it
        worker.forget("x", forked.workspace, remove=True)
        assert not os.path.exists(forked.workspace)
        assert not mounts.overlays_beneath(store)
    finally:
        worker.close()
        _unmount(store)


def _unmount(store: str) -> None:
    """What a failed test left mounted."""
    for point in mounts.overlays_beneath(store):
        mounts.unmount(point)


@ROOT_ONLY
def test_a_dead_pools_forks_are_discarded_when_a_pool_starts(box: Box) -> None:
    _tree(box.ws, 5)
    snap = LayeredSnapshots().take(str(box.ws), cap=10**7)
    store = str(box.root / "state")
    dead, closed = _worker(box.root / "state"), _worker(box.root / "state")
    left = asyncio.run(dead.seed(str(box.root / "a"), snap, LayeredSnapshots()))
    kept = asyncio.run(closed.seed(str(box.root / "b"), snap, LayeredSnapshots()))
    assert left.method == kept.method == "overlay"
    os.close(dead._live)  # its process killed with its driver: no shutdown ran
    dead._live = -1
    closed.close()  # shut down cleanly, keeping a closed episode's fork
    assert mounts.is_overlay(left.workspace) and mounts.is_overlay(kept.workspace)
    fresh = _worker(box.root / "state")  # a pool starts on the node
    try:
        assert not os.path.exists(left.workspace) and not os.path.exists(left.base)
        assert mounts.overlays_beneath(store) == [kept.workspace]  # the closed one's stays
        assert (Path(kept.workspace) / "d0" / "f0.txt").read_text() == "file 0\n"
        snapshots.discard(snapshots.get(Path(kept.base).name, store=store), store=store)
        assert not mounts.overlays_beneath(store)
    finally:
        fresh.close()
        dead.doer.close()
        _unmount(store)
