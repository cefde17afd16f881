"""Kept watches (run/kept.py): the same answer as a per-call watch, command after command,
and the pool that lends them (one command at a time, too large, idle, least recently used)."""

import importlib.util
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stockade.run import kept as kept_module
from stockade.run.changes import TooLarge, watch
from stockade.run.kept import Kept, Watches


def _oracle():
    """test_changes.py's tree helpers and oracle model (tests import in importlib mode)."""
    found = importlib.util.spec_from_file_location(
        "stockade_test_changes", Path(__file__).with_name("test_changes.py")
    )
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


_o = _oracle()
Model, lists, ops, past, rel, tree = _o.Model, _o.lists, _o.ops, _o.past, _o.rel, _o.tree
ws = _o.ws  # the fixture: the same small tree, its times in the past


def dirs_of(root):
    """Every directory under ``root`` as the watch names it ("" and "x/y/")."""
    found = [""]
    for where, subdirs, _files in os.walk(root):
        base = os.path.relpath(where, root)
        prefix = "" if base == "." else base + "/"
        found += [prefix + d + "/" for d in subdirs]
    return sorted(found)


def assert_current(k, root):
    """The kept listing is what a fresh listing gives, and one watch names each directory."""
    assert sorted(k._before) == dirs_of(root)
    for d, entries in k._before.items():
        assert sorted(e.name for e in entries) == sorted(os.listdir(os.path.join(root, d)))
    assert sorted(k._wds.values()) == dirs_of(root)
    assert sorted(k._wd_of) == dirs_of(root)


def test_commands_one_after_another_each_get_their_own_changes(ws):
    k = Kept(ws)
    try:
        tree(ws, {"new": "n"})
        assert lists(k.settle()) == (("new",), (), ())
        os.rename(rel(ws, "d"), rel(ws, "a/d2"))  # a directory moves: its watches follow
        assert k.settle().created == ("a/d2/", "a/d2/x", "a/d2/y/", "a/d2/y/z")
        tree(ws, {"a/d2/y/w": "w"})  # inside the moved directory: seen at its new path
        assert lists(k.settle()) == (("a/d2/y/w",), (), ())
        shutil.rmtree(rel(ws, "a"))
        deleted = ("a/", "a/b/", "a/b/g", "a/d2/", "a/d2/x", "a/d2/y/", "a/d2/y/w", "a/d2/y/z")
        assert k.settle().deleted == (*deleted, "a/f")
        assert lists(k.settle()) == ((), (), ())  # nothing since
        assert_current(k, ws)
        assert not k.broken
    finally:
        k.close()


def test_a_directory_moved_out_is_no_longer_watched(ws, tmp_path):
    k = Kept(ws)
    try:
        os.rename(rel(ws, "d"), tmp_path / "out")
        assert k.settle().deleted == ("d/", "d/x", "d/y/", "d/y/z")
        assert_current(k, ws)
        (tmp_path / "out" / "x").write_text("written outside")  # no longer this tree's
        assert lists(k.settle()) == ((), (), ())
    finally:
        k.close()


def test_a_directory_replaced_at_its_path(ws):
    k = Kept(ws)
    try:
        shutil.rmtree(rel(ws, "d"))
        tree(ws, {"d/q": "q"})
        assert lists(k.settle()) == (("d/q",), ("d/",), ("d/x", "d/y/", "d/y/z"))
        assert_current(k, ws)
        tree(ws, {"d/r": "r"})  # the new directory is watched
        assert lists(k.settle()) == (("d/r",), (), ())
    finally:
        k.close()


def test_the_root_replaced_breaks_it(ws, tmp_path):
    k = Kept(ws)
    try:
        os.rename(ws, tmp_path / "old")
        tree(ws, {"only": "o"})
        changes = k.settle()
        assert changes.created == ("only",)
        assert "keep" in changes.deleted
        assert k.broken
    finally:
        k.close()


def test_a_queue_overflow_answers_by_scan_and_breaks_it(ws):
    k = Kept(ws)
    try:
        with k._lock:
            k._overflow = True  # what _read does on IN_Q_OVERFLOW
        tree(ws, {"c/new": "n"})
        changes = k.settle()
        assert (changes.method, changes.created) == ("scan", ("c/new",))
        assert k.broken
    finally:
        k.close()


def test_growing_past_the_bound_breaks_it(ws):
    k = Kept(ws, max_entries=12)
    try:
        tree(ws, {f"c/{i}": "x" for i in range(6)})
        assert len(k.settle().created) == 6  # this command's answer stands
        assert "more than 12" in k.broken
    finally:
        k.close()


def test_too_large_to_start(tmp_path):
    root = tree(str(tmp_path / "big"), {f"{i}": "" for i in range(20)})
    with pytest.raises(TooLarge):
        Kept(root, max_entries=10)


def test_settle_after_close_refuses(ws):
    k = Kept(ws)
    k.close()
    with pytest.raises(RuntimeError):
        k.settle()


rounds = st.lists(st.tuples(ops, ops), min_size=1, max_size=3)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=ops, rounds=rounds)
def test_each_command_gets_what_a_per_call_watch_gets(setup, rounds):
    """Others change the tree between commands; each command's answer from the kept watch
    equals a per-call watch's over the same command, and the listing stays current."""
    with tempfile.TemporaryDirectory() as root:
        model = Model(root)
        for op in setup:
            model.apply(*op)
        k = Kept(root)
        try:
            for others, command in rounds:
                for op in others:
                    model.apply(*op)
                k.settle()  # just before the command: not its changes
                w = watch(root)
                for op in command:
                    model.apply(*op)
                mine, theirs = k.settle(), w.finish()
                assert mine == theirs
                assert not k.broken
                assert_current(k, root)
        finally:
            k.close()


# --- the pool ---------------------------------------------------------------------------------


def test_a_folder_is_lent_to_one_command_at_a_time(ws):
    pool = Watches()
    try:
        first = pool.track(ws)
        assert isinstance(first, kept_module._Lent)
        second = pool.track(ws)  # the same folder while the first command runs
        assert not isinstance(second, kept_module._Lent)
        tree(ws, {"new": "n"})
        assert second.finish().created == ("new",)  # a per-call watch sees it too
        assert first.finish().created == ("new",)
        assert pool.watched() == {ws: False}
        third = pool.track(ws)  # given back: lent again, the same kept watch
        assert isinstance(third, kept_module._Lent)
        assert lists(third.finish()) == ((), (), ())
    finally:
        pool.close()


def test_changes_between_commands_are_not_the_next_ones(ws):
    pool = Watches()
    try:
        pool.track(ws).finish()
        tree(ws, {"by-someone-else": "x"})
        lent = pool.track(ws)
        tree(ws, {"by-the-command": "y"})
        assert lent.finish().created == ("by-the-command",)
    finally:
        pool.close()


def test_a_command_that_did_not_finish_gives_its_watch_back(ws):
    pool = Watches()
    try:
        lent = pool.track(ws)
        tree(ws, {"half": "h"})
        lent.close()
        assert pool.watched() == {ws: False}
        assert lists(pool.track(ws).finish()) == ((), (), ())
    finally:
        pool.close()


def test_too_large_is_not_reported_nor_tried_again_until_idle(tmp_path, monkeypatch):
    root = tree(str(tmp_path / "big"), {f"{i}": "" for i in range(20)})
    now = [1000.0]
    monkeypatch.setattr(kept_module, "_clock", lambda: now[0])
    pool = Watches(max_entries=10, idle=60.0)
    made = []
    monkeypatch.setattr(kept_module, "Kept", lambda *a, **k: made.append(a) or Kept(*a, **k))
    try:
        assert pool.track(root) is None
        assert pool.track(root) is None
        assert len(made) == 1  # the second call paid nothing
        assert pool.watched() == {}
        now[0] += 61  # past idle: the folder is tried again (it may have shrunk)
        pool.sweep()
        assert pool.track(root) is None
        assert len(made) == 2
    finally:
        pool.close()


def test_a_broken_watch_is_made_anew_for_the_next_command(ws):
    pool = Watches()
    try:
        lent = pool.track(ws)
        first = lent._kept
        with first._lock:
            first._overflow = True
        tree(ws, {"new": "n"})
        assert lent.finish().method == "scan"
        assert pool.watched() == {}  # dropped, and closed
        assert first._state == "closed"
        lent = pool.track(ws)
        assert lent._kept is not first
        tree(ws, {"newer": "n"})
        assert lent.finish().created == ("newer",)
    finally:
        pool.close()


def test_idle_watches_are_closed_but_not_one_lent(tmp_path):
    roots = [tree(str(tmp_path / f"w{i}"), {"f": "x"}) for i in range(3)]
    pool = Watches(idle=0.0)
    try:
        lent = [pool.track(r) for r in roots]
        for one in lent[:2]:
            one.finish()
        kept_ones = [one._kept for one in lent]
        assert pool.sweep() == 1  # the one still lent stays
        assert pool.watched() == {roots[2]: True}
        assert [k._state for k in kept_ones] == ["closed", "closed", "watching"]
        tree(roots[2], {"g": "y"})
        assert lent[2].finish().created == ("g",)
    finally:
        pool.close()


def test_past_keep_the_least_recently_used_goes(tmp_path):
    roots = [tree(str(tmp_path / f"w{i}"), {"f": "x"}) for i in range(4)]
    pool = Watches(keep=2)
    try:
        first = pool.track(roots[0])  # lent the whole time: never closed
        for r in roots[1:]:
            pool.track(r).finish()
        assert sorted(pool.watched()) == [roots[0], roots[3]]
        assert first._kept._state == "watching"
        first.finish()
    finally:
        pool.close()


def test_closing_the_pool_waits_for_a_lent_watch(ws):
    pool = Watches()
    lent = pool.track(ws)
    pool.close()
    assert lent._kept._state == "watching"  # its command is still running
    tree(ws, {"new": "n"})
    assert lent.finish().created == ("new",)
    assert lent._kept._state == "closed"  # closed when given back
    assert not isinstance(pool.track(ws), kept_module._Lent)  # a closed pool lends no more


def test_many_commands_at_once_in_one_folder(ws):
    pool = Watches()
    results, errors = {}, []

    def command(i):
        try:
            lent = pool.track(ws)
            tree(ws, {f"t{i}": "x"})
            results[i] = lent.finish()
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    try:
        threads = [threading.Thread(target=command, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        for i in range(8):  # each saw its own file (and perhaps the others')
            assert f"t{i}" in results[i].created
        assert pool.watched() == {ws: False}
        later = pool.track(ws)
        assert lists(later.finish()) == ((), (), ())  # the kept listing is current
    finally:
        pool.close()
