"""The time a command's layers begin splits file changes cleanly on the kernel's own stamps:
every change made before :func:`stockade.layers.clock.begin` is stamped at most its time,
every change made after it returns is stamped later, however close to it either is."""

from __future__ import annotations

import os
import types

from stockade.layers import clock


def test_changes_just_before_and_just_after_fall_on_their_side(tmp_path):
    layer = tmp_path / "layer"
    layer.mkdir()
    before = tmp_path / "before"
    for round_ in range(300):
        after = tmp_path / f"after-{round_}"  # new: its time was never queried
        before.write_text(str(round_))
        if round_ % 2:
            os.stat(before)  # a queried time: the next change may get a fine stamp
            before.write_text(f"{round_}!")
        began = clock.begin([str(layer)])
        after.write_text(str(round_))
        assert os.stat(before).st_ctime_ns <= began < os.stat(after).st_ctime_ns, round_


def test_where_no_folder_can_be_stamped_it_begins_under_the_fine_clock(tmp_path):
    before = tmp_path / "before"
    before.write_text("x")
    began = clock.begin([str(tmp_path / "missing")])
    assert began < os.stat(before).st_ctime_ns  # earlier: a change that soon is a conflict
    assert clock.begin([]) < os.stat(before).st_ctime_ns


def test_where_the_stamp_never_moves_every_change_of_its_time_is_a_conflict(tmp_path, monkeypatch):
    # A filesystem that stores whole seconds: the stamp stays put within the wait.
    layer = tmp_path / "layer"
    layer.mkdir()
    stamp = os.stat(tmp_path).st_ctime_ns
    fstat = os.fstat

    def frozen(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("/" + clock.STAMP):
            return types.SimpleNamespace(st_ctime_ns=stamp)
        return fstat(fd)

    monkeypatch.setattr(os, "fstat", frozen)
    began = clock.begin([str(layer)])
    assert began == stamp - 1  # a change stamped with the same time is later: a conflict
