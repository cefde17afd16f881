"""Forks unpack a snapshot without ever writing outside the fork: archives naming ``..``,
an absolute path, a hard link or a device are refused, and a link is never written through
(a file below a link's name lands in a real folder, and the link is then refused), where
the same archive without the trick unpacks whole (the control). Exports keep binary files
whole and name what changed. Where a node's steps write through layers, forks are hard links
to one layers' snapshot made on the node once; where they would write directly, a copy that
says why."""

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

pytest.importorskip("ray")  # optional (see conftest.py)

from stockade_ray.forks import TooLarge, export, manifest, pack, unpack
from stockade_ray.layered import LayeredSnapshots, forget_pool
from stockade_ray.worker import Worker


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


def test_forks_from_layers_share_one_snapshot_and_copies_say_why(box: Box) -> None:
    _tree(box.ws, 30)
    snap = LayeredSnapshots().take(str(box.ws), cap=10**7)
    worker = _worker(box.root / "state")
    try:
        first, second = (asyncio.run(worker.seed(str(box.root / n), snap, LayeredSnapshots()))
                         for n in ("a", "b"))  # fmt: skip
        assert first.method == second.method == "layers", first.why
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
        assert copied.workspace == str(box.root / "c") and copied.files == 30
        inode = os.stat(box.ws / "d0" / "f0.txt").st_ino
        assert os.stat(box.root / "c" / "d0" / "f0.txt").st_ino != inode
    finally:
        direct.close()
