"""A sparse file lands across filesystems (into a fork mounted as an overlay) with its holes:
it takes in the fork about the blocks it took in the layer, which is what the quota counted
(``st_blocks``), never its whole size (the review's ``truncate -s 1G big`` under a 20 MB
quota took 1 GiB of disk). Its data reads back the same at every offset, and the copy keeps
:mod:`stockade.layers.across`'s other guarantees (no setuid bit, its mode and times).

The control: a plain ``sendfile`` copy of the same file, as the landing made before,
allocates the whole size.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade.config.schema import Config, store_folder
from stockade.layers import Rules, Tally, land, mounts, place, snapshots
from stockade.layers.across import carry
from stockade.request.spec import ExecRequest, Profile

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="an overlay fork is root's")
SIZE = 1 << 30
MIB = 1 << 20
DATA = {0: b"head" * 1024, 300 * MIB + 5: b"middle" * 3000, SIZE - 4096: b"t" * 4096}
"""Offsets in the sparse file and what is written there; the rest is holes."""
ZEROS = (8 * MIB, 300 * MIB - 4096, 700 * MIB, SIZE - 8192)
"""Offsets that hold nothing (4 KiB read at each must be zeros)."""
SLACK = 64 * 4096
"""How many more bytes than the source the copy may allocate (a filesystem's own blocks)."""
WHEN = (1_000_000_000, 1_200_000_000)


def _sparse(path: Path, mode: int = 0o644) -> None:
    """A ``SIZE`` file with :data:`DATA` written and holes elsewhere, ``mode``, times
    :data:`WHEN`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, SIZE)
        for offset, data in DATA.items():
            os.pwrite(fd, data, offset)
    finally:
        os.close(fd)
    os.chmod(path, mode)
    os.utime(path, WHEN)


def _same(copy: Path) -> None:
    """``copy`` holds :data:`DATA` where it was written and zeros in the holes."""
    assert copy.stat().st_size == SIZE
    with copy.open("rb") as handle:
        for offset, data in DATA.items():
            handle.seek(offset)
            assert handle.read(len(data)) == data, offset
        for offset in ZEROS:
            handle.seek(offset)
            assert handle.read(4096) == bytes(4096), offset


def _dense(source: Path, target: Path) -> None:
    """The control: the copy as the landing made it before (``sendfile``, every byte)."""
    with source.open("rb") as read, target.open("xb") as write:
        left = SIZE
        while left > 0:
            sent = os.sendfile(write.fileno(), read.fileno(), None, min(left, 1 << 30))
            if sent == 0:
                break
            left -= sent


@pytest.fixture
def folders(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    up, dst = tmp_path / "up", tmp_path / "dst"
    up.mkdir()
    dst.mkdir()
    yield up, dst
    for folder in (up, dst):  # a gigabyte is not left for pytest to keep
        for name in os.listdir(folder):
            os.unlink(folder / name)


@pytest.mark.parametrize("copy", ["holes", "control"])
def test_a_carried_sparse_file_keeps_its_holes(folders, copy):
    up, dst = folders
    _sparse(up / "big", 0o4755)
    source = (up / "big").stat()
    assert source.st_blocks * 512 < 2 * MIB  # it is sparse
    if copy == "control":  # the breach: every byte written, the size allocated
        _dense(up / "big", dst / "big")
        assert (dst / "big").stat().st_blocks * 512 >= SIZE
        _same(dst / "big")
        return
    up_fd, dst_fd = os.open(up, os.O_RDONLY), os.open(dst, os.O_RDONLY)
    try:
        carry(up_fd, dst_fd, "big")
    finally:
        os.close(up_fd)
        os.close(dst_fd)
    landed = (dst / "big").stat()
    assert landed.st_blocks <= source.st_blocks + SLACK // 512
    _same(dst / "big")
    assert stat.S_IMODE(landed.st_mode) == 0o755  # no setuid bit lands
    assert (landed.st_atime_ns, landed.st_mtime_ns) == tuple(t * 10**9 for t in WHEN)
    assert not (up / "big").exists() and os.listdir(dst) == ["big"]


def test_a_file_of_holes_alone_and_one_of_data_alone_are_carried(folders):
    up, dst = folders
    (up / "holes").write_bytes(b"")
    os.truncate(up / "holes", 5 * MIB + 3)
    (up / "dense").write_bytes(os.urandom(3 * MIB + 7))
    dense = (up / "dense").read_bytes()
    up_fd, dst_fd = os.open(up, os.O_RDONLY), os.open(dst, os.O_RDONLY)
    try:
        carry(up_fd, dst_fd, "holes")
        carry(up_fd, dst_fd, "dense")
    finally:
        os.close(up_fd)
        os.close(dst_fd)
    assert (dst / "holes").read_bytes() == bytes(5 * MIB + 3)
    assert (dst / "holes").stat().st_blocks == 0
    assert (dst / "dense").read_bytes() == dense


@pytest.fixture
def fork(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """An overlay fork (its folder) of a small snapshot, and the store."""
    store = store_folder(Config())
    source = tmp_path / "source"
    source.mkdir()
    (source / "README").write_text("r\n")
    snap = snapshots.take(str(source), store=store)
    made = snapshots.fork_one(snap, store=store, overlay=True)
    assert made.method == "overlay", made.why
    yield made.folder, store
    snapshots.discard(snap, store=store)


@ROOT_ONLY
def test_a_sparse_file_lands_into_an_overlay_fork_with_its_holes(fork):
    folder, store = fork
    [layer] = place.make((folder,), store, "sparse") or ()
    assert os.stat(layer.upper).st_dev != os.stat(folder).st_dev  # landing must copy
    _sparse(Path(layer.upper) / "big")
    source = (Path(layer.upper) / "big").stat().st_blocks
    tally = Tally()
    land(layer, Rules(os.path.join(store, "quarantine")), tally)
    place.discard((layer,))
    assert tally.created == [os.path.join(folder, "big")] and tally.failed == []
    landed = Path(folder, "big")
    assert landed.stat().st_blocks <= source + SLACK // 512
    _same(landed)
    landed.unlink()


@ROOT_ONLY
def test_a_sparse_file_a_command_makes_in_a_fork_lands_within_its_quota(fork, make_host):
    folder, _ = fork
    agent = Profile(name="bot", workspace=folder, quota_mb=20)
    host = make_host(allow_all=True, config=Config(sandbox="bubblewrap", agents={"bot": agent}))
    script = "truncate -s 1G big && printf data | dd of=big bs=1 seek=1000 conv=notrunc"
    result = host.run(ExecRequest(("sh", "-c", script), folder, profile="bot"))
    assert result.exit_code == 0, result.stderr.text
    assert result.landed == "landed"
    landed = Path(folder, "big")
    assert landed.stat().st_size == SIZE
    assert landed.stat().st_blocks * 512 < MIB  # not the gigabyte the review saw
    with landed.open("rb") as handle:
        handle.seek(1000)
        assert handle.read(4) == b"data"
    assert mounts.is_overlay(folder)
    landed.unlink()
