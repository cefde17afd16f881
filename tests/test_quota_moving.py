"""A quota's measure that a folder moved under is taken again, never taken as whole (an
attack review's finding). The measure walks by descriptors, going back up by ``..`` past 32
levels, and a folder moved meanwhile stops it there: it used to end silently, so a command
that kept moving a folder deep in its tree hid from the quota what sorts after it (14 of 40
measures read 0 of 50 MiB). Now each measure either counts the whole tree or is taken
again, and a workspace that changes under three in a row counts as over its quota. The
control: the same walk whose interruption is swallowed, as before, misses the data."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade.run import quota
from stockade.workspace.folders import statuses

MIB = 1 << 20
BIG = 8 * MIB


@pytest.fixture
def moving(tmp_path: Path) -> Iterator[Path]:
    """A tree: a chain 40 folders deep under ``0``, data under ``z``; a thread that keeps
    moving the chain's folder at depth 9 away and back."""
    (tmp_path / "z").mkdir()
    (tmp_path / "z" / "big").write_bytes(os.urandom(BIG))
    os.makedirs(tmp_path.joinpath("0", *["c"] * 40))
    folder, parked = tmp_path.joinpath("0", *["c"] * 8), tmp_path / "parked"
    stop = threading.Event()

    def mover() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                os.rename(folder, parked)
                os.rename(parked, folder)

    thread = threading.Thread(target=mover, daemon=True)
    thread.start()
    try:
        yield tmp_path
    finally:
        stop.set()
        thread.join()


def _swallowed(folder: Path) -> int:
    """The measure as it was: an interrupted walk's partial count taken as whole."""
    total = 0
    with contextlib.suppress(OSError):
        for info in statuses(str(folder)):
            total += info.st_blocks * 512
    return total


def test_a_measure_a_folder_moved_under_never_misses_what_follows(moving: Path) -> None:
    missed = next((i for i in range(400) if _swallowed(moving) < BIG), None)
    assert missed is not None  # the control: a swallowed interruption misses the data
    for _ in range(40):
        try:
            assert quota.usage(str(moving)) >= BIG  # whole, or...
        except quota.Unmeasured as error:  # ...taken as over the quota, never as less
            assert error.code == "quota_exceeded"


def test_a_workspace_that_changes_under_every_measure_is_over(monkeypatch, tmp_path) -> None:
    def cut_short(folder: str, *, strict: bool = False) -> Iterator[os.stat_result]:
        yield os.stat(folder)
        raise OSError(116, "a folder moved")  # ESTALE, as FolderChain.up raises it

    monkeypatch.setattr("stockade.workspace.folders.statuses", cut_short)
    with pytest.raises(quota.Unmeasured, match="measured whole for its quota, 3 times"):
        quota.usage(str(tmp_path))


def test_the_watch_stops_a_command_its_workspace_changes_under(monkeypatch, tmp_path) -> None:
    from stockade.run.executor import AbortToken

    stop = AbortToken()
    watch = quota.Watch(str(tmp_path), 10 * MIB, stop, interval=0.01)  # measured once: fine

    def unmeasured(folder: str) -> int:
        raise quota.Unmeasured("changed under each measure")

    monkeypatch.setattr(quota, "usage", unmeasured)
    assert stop._event.wait(5)  # the running command is stopped...
    watch.finish()
    assert watch.exceeded  # ...as over its quota
