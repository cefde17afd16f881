"""A tree as deep as a command can make one (3,000 folders, each made from its parent's
descriptor, so ``PATH_MAX`` never limits it) is copied, removed, walked and measured by the
host without recursion (:mod:`stockade.trees`, :mod:`stockade.tree_copy`), and nothing is
followed through the links planted in it to a canary outside.

Each has its control: :func:`shutil.copytree`, :func:`shutil.rmtree` (by path and by
descriptor) and :func:`os.walk` raise ``RecursionError`` on the very same tree, which no
``ignore_errors`` catches; a walk holding a descriptor per level runs out of them.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade import trees
from stockade.config.schema import Config
from stockade.layers import snapshots
from stockade.policy.private import _with_links
from stockade.run.quota import usage
from stockade.tree_copy import copy_tree
from stockade.trees import remove_at, remove_tree
from stockade.workspace import folders

from .test_layers_deep import _descriptors

DEPTH = 3_000
MIDDLE = 1_000
"""Where the tree holds a file whose path is still under ``PATH_MAX`` (``d/`` 1,000 times)."""
LEAF = b"leaf " * 2_000
ROOM = trees.WINDOW * 2 + 16
"""The descriptors a copy may open: both trees' windows and a few."""


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Path]:
    """``src`` holds the deep tree; ``outside`` a canary folder and file its links name."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary").write_text("CANARY")
    (tmp_path / "src").mkdir()
    _deep(tmp_path / "src", outside)
    yield tmp_path
    remove_tree(str(tmp_path))  # pytest's own cleanup of old temporary folders recurses


def _deep(top: Path, outside: Path, depth: int = DEPTH) -> None:
    """``depth`` folders ``d`` one in another, each made from its parent's descriptor, as a
    command makes them: a file in the ``MIDDLE`` one and a leaf, a fifo and links out to
    ``outside`` (its folder and its canary) at the bottom."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(depth):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
            if level + 1 == MIDDLE:
                _write(fd, "middle", b"middle")
        _write(fd, "leaf", LEAF)
        os.chmod(f"/proc/self/fd/{fd}", 0o700)  # a mode of its own, kept by a copy
        os.symlink(str(outside), "out", dir_fd=fd)
        os.symlink(str(outside / "canary"), "canary", dir_fd=fd)
    finally:
        os.close(fd)


def _write(fd: int, name: str, data: bytes) -> None:
    out = os.open(name, os.O_WRONLY | os.O_CREAT, 0o640, dir_fd=fd)
    os.write(out, data)
    os.close(out)


def _bottom(top: Path) -> Iterator[int]:
    """Each folder ``d`` under ``top`` in turn, by descriptor (closed after)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            try:
                inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                return
            os.close(fd)
            fd = inner
            yield fd
    finally:
        os.close(fd)


def _at(top: Path, depth: int, name: str) -> os.stat_result:
    """The status of ``name`` in the folder ``depth`` levels down ``top``."""
    for level, fd in enumerate(_bottom(top), 1):
        if level == depth:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
    raise FileNotFoundError(name)


def _untouched(box: Path) -> None:
    assert sorted(os.listdir(box / "outside")) == ["canary"]
    assert (box / "outside" / "canary").read_text() == "CANARY"


# --- the controls: the standard library's walks on the same tree -------------------------


def test_the_standard_library_raises_recursion_error_on_the_tree(box) -> None:
    with pytest.raises(RecursionError):
        shutil.copytree(box / "src", box / "copied", symlinks=True)
    remove_tree(str(box / "copied"))
    with pytest.raises(RecursionError):
        list(os.walk(box / "src"))
    with pytest.raises(RecursionError):
        shutil.rmtree(box / "src", ignore_errors=True)
    fd = os.open(box, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(RecursionError):
            shutil.rmtree("src", dir_fd=fd, ignore_errors=True)
    finally:
        os.close(fd)


# --- copy -------------------------------------------------------------------------------


def test_a_deep_tree_is_copied_whole_and_its_links_are_not_followed(box) -> None:
    with _descriptors(ROOM):
        copy_tree(str(box / "src"), str(box / "copied"))
    depth = 0
    for depth, fd in enumerate(_bottom(box / "copied"), 1):
        names = sorted(os.listdir(fd))
        if depth == MIDDLE:
            assert os.read(os.open("middle", os.O_RDONLY, dir_fd=fd), 100) == b"middle"
        if depth == DEPTH:
            assert names == ["canary", "leaf", "out"]
            assert os.readlink("out", dir_fd=fd) == str(box / "outside")
            assert os.readlink("canary", dir_fd=fd) == str(box / "outside" / "canary")
            info = os.stat("leaf", dir_fd=fd)
            assert stat.S_IMODE(info.st_mode) == 0o640
            assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o700
            leaf = os.open("leaf", os.O_RDONLY, dir_fd=fd)
            assert os.read(leaf, len(LEAF) + 1) == LEAF
            os.close(leaf)
    assert depth == DEPTH
    _untouched(box)


def test_a_linked_copy_shares_the_files_and_follows_no_link(box) -> None:
    with _descriptors(ROOM):
        copy_tree(str(box / "src"), str(box / "linked"), link=True)
    leaf, source = _at(box / "linked", DEPTH, "leaf"), _at(box / "src", DEPTH, "leaf")
    assert (leaf.st_ino, leaf.st_nlink) == (source.st_ino, 2)
    assert stat.S_ISLNK(_at(box / "linked", DEPTH, "out").st_mode)
    _untouched(box)


def test_copying_into_a_tree_never_writes_through_a_name_there(box) -> None:
    """``exist_ok`` copies into folders there, but a file there (a hard link to the canary,
    planted by a command) is refused, never overwritten."""
    (box / "into").mkdir()
    os.link(box / "outside" / "canary", box / "into" / "leaf")
    (box / "small").mkdir()
    (box / "small" / "leaf").write_text("OVERWRITTEN")
    (box / "small" / "more").write_text("more")
    with pytest.raises(shutil.Error) as failed:
        copy_tree(str(box / "small"), str(box / "into"), exist_ok=True)
    assert [e[1] for e in failed.value.args[0]] == [str(box / "into" / "leaf")]
    assert (box / "into" / "more").read_text() == "more"
    _untouched(box)


def test_a_snapshot_of_a_deep_workspace_holds_all_of_it(box) -> None:
    store = box / "store"
    taken = snapshots.take(str(box / "src"), store=str(store))
    assert sum(1 for _ in _bottom(Path(taken.folder))) == DEPTH
    _untouched(box)


# --- removal ----------------------------------------------------------------------------


def test_a_deep_tree_is_removed_by_its_name_in_a_folder(box) -> None:
    fd = os.open(box, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with _descriptors(ROOM):
            remove_at(fd, "src")
    finally:
        os.close(fd)
    assert not (box / "src").exists()
    _untouched(box)


@pytest.mark.skipif(os.geteuid() == 0, reason="root removes from a folder without rights")
def test_what_cannot_be_removed_stays_and_is_said(box) -> None:
    """As ``shutil.rmtree`` without ``ignore_errors``: a folder a command took its rights
    away from is not emptied (``OSError``); ``own`` gives them back first."""
    path = box / "src" / ("d/" * 10)
    os.chmod(path, 0o500)
    fd = os.open(box, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError, match="not empty"):
            remove_at(fd, "src")
        assert (path / "d").is_dir()
        remove_at(fd, "src", own=True)
    finally:
        os.close(fd)
    assert not (box / "src").exists()
    _untouched(box)


def test_a_cache_and_a_run_home_of_any_depth_are_emptied(box) -> None:
    config = Config()
    assert folders.clear(str(box / "src")) == 1
    assert os.listdir(box / "src") == []
    home = folders.Home(config, "run-1")
    _deep(Path(home.path), box / "outside")
    home.remove()
    assert not os.path.lexists(home.path)
    _untouched(box)


# --- walks ------------------------------------------------------------------------------


def test_the_quota_counts_a_file_at_any_depth_in_few_descriptors(box) -> None:
    with _descriptors(ROOM):
        size, files = folders.usage(str(box / "src"))
        used = usage(str(box / "src"))
    assert files == 4  # middle, leaf and the two links
    assert size >= len(LEAF) and used >= len(LEAF)


def test_a_hard_link_to_a_private_file_is_found_in_a_deep_workspace(box) -> None:
    private = box / "src" / "notes.txt"
    private.write_text("CANARY")
    middle = box / "src" / ("d/" * MIDDLE)
    os.link(private, middle / "innocent")
    found = _with_links(str(box / "src"), [str(private)])
    assert found == [str(private), str(middle / "innocent")]
