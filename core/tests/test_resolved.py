"""The host's ``realpath`` resolves again when a confined command changes the tree under it,
and raises what it cannot know."""

from __future__ import annotations

import os
import threading

import pytest

from stockade import resolved


def test_a_link_swapped_back_and_forth_never_makes_it_raise(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "home").mkdir()
    sub = tmp_path / "sub"
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            os.symlink("home", sub)
            os.unlink(sub)
            os.rename(tmp_path / "real", sub)
            os.rename(sub, tmp_path / "real")

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        seen = {resolved.realpath(sub / ".bashrc") for _ in range(20_000)}
    finally:
        stop.set()
        swapper.join()
    # each answer is the tree at some moment: the link's target, or the name itself
    assert seen <= {str(tmp_path / "home" / ".bashrc"), str(sub / ".bashrc")}, seen


def test_the_stdlib_race_is_resolved_again(tmp_path, monkeypatch):
    (tmp_path / "target").mkdir()
    os.symlink("target", tmp_path / "link")
    calls = []
    readlink = os.readlink

    def racing(path, *args, **kwargs):  # gone the first two times it is read
        calls.append(path)
        if len(calls) <= 2:
            raise FileNotFoundError(2, "No such file or directory", path)
        return readlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "readlink", racing)
    assert resolved.realpath(tmp_path / "link" / "f") == str(tmp_path / "target" / "f")
    assert len(calls) == 3


def test_a_race_that_always_wins_raises_its_error(tmp_path, monkeypatch):
    os.symlink("elsewhere", tmp_path / "link")

    def gone(path, *args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", path)

    monkeypatch.setattr(os, "readlink", gone)
    with pytest.raises(FileNotFoundError):  # never the name unresolved
        resolved.realpath(tmp_path / "link" / ".." / "f")


def test_an_unreadable_link_raises_at_once(tmp_path, monkeypatch):
    os.symlink("elsewhere", tmp_path / "link")
    calls = []

    def denied(path, *args, **kwargs):
        calls.append(path)
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(os, "readlink", denied)
    with pytest.raises(PermissionError):  # "cannot be known", as the stdlib says it
        resolved.realpath(tmp_path / "link")
    assert len(calls) == 1


def test_a_folder_above_swapped_for_a_file_is_resolved_again(tmp_path, monkeypatch):
    (tmp_path / "target").mkdir()
    os.symlink("target", tmp_path / "link")
    calls = []
    readlink = os.readlink

    def swapped(path, *args, **kwargs):  # a folder of the prefix was a file, then a loop
        calls.append(path)
        if len(calls) == 1:
            raise NotADirectoryError(20, "Not a directory", path)
        if len(calls) == 2:
            raise OSError(40, "Too many levels of symbolic links", path)
        return readlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "readlink", swapped)
    assert resolved.realpath(tmp_path / "link") == str(tmp_path / "target")
