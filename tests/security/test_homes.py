"""The kit's attacks on run homes and caches (:mod:`stockade.conformance.suite.test_homes`), on
both providers; and what only the host does with them: a home removed when its run ends, a
fresh one for the next run, caches kept between runs, a dead run's home swept."""

from __future__ import annotations

import os

from stockade.conformance.suite.test_homes import *  # noqa: F403
from stockade.conformance.suite.test_homes import _config, _probe


def test_a_run_home_is_removed_at_its_end_and_the_next_run_gets_a_fresh_one(box, make_host, mode):
    first = make_host(allow_all=True, config=_config(box))
    home = str(_probe(first, box, mode, "step1")["home"])
    assert home.startswith(str(box.root / "store" / "homes")) and os.path.isdir(home)
    first.close()
    assert not os.path.exists(home)
    second = make_host(allow_all=True, config=_config(box))
    again = _probe(second, box, mode, "other")
    assert again["home"] != home and again["found"] == []


def test_caches_written_by_one_run_are_kept_for_the_next(box, make_host):
    writer = make_host(allow_all=True, config=_config(box))
    cache = str(_probe(writer, box, "workspace-write", "x")["cache"])
    wheel = os.path.join(cache, "wheel")
    wrote = _probe(writer, box, "workspace-write", "x", "write", wheel)
    assert wrote["write " + wheel] == "ok", wrote
    writer.close()
    reader = make_host(allow_all=True, config=_config(box))
    read = _probe(reader, box, "read-only", "y", "read", wheel)
    assert read["read " + wheel] == "planted", read
    assert sorted(os.listdir(cache)) == ["wheel"]


def test_a_home_left_by_a_run_that_died_is_removed_by_the_next(box, make_host):
    homes = box.root / "store" / "homes"
    homes.mkdir(parents=True)
    (homes / "rdead").mkdir()
    (homes / "rdead" / "left").write_text("x")
    (homes / "rdead.lock").write_text("")
    host = make_host(allow_all=True, config=_config(box))
    _probe(host, box, "read-only", "x")
    assert not (homes / "rdead").exists()
