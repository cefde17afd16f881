"""An agent's run gets a fresh home, removed when the run ends; its package caches are
kept between runs and written only by commands that may write."""

from __future__ import annotations

import os

import attrs

from stockade.config.schema import Config, StoreConfig
from stockade.request.spec import Profile

from .conftest import PYTHON

PROBE = (
    "import os, sys\n"
    "home, cache = os.environ['HOME'], os.environ['PIP_CACHE_DIR']\n"
    "print('HOME', home)\n"
    "print('FOUND', sorted(os.listdir(home)))\n"
    "open(os.path.join(home, sys.argv[1]), 'w').write('mine')\n"
    "print('KEPT', sorted(os.listdir(cache)))\n"
    "try:\n"
    "    open(os.path.join(cache, sys.argv[1]), 'w').write('cached')\n"
    "    print('CACHE WROTE')\n"
    "except OSError as e:\n"
    "    print('cache refused', e.errno)\n"
)


def _config(box):
    return Config(
        sandbox=box.sandbox,
        store=StoreConfig(str(box.home / ".local" / "state" / "stockade" / "store.db")),
        agents={"bot": Profile(name="bot")},
    )


def _probe(host, box, name, mode):
    request = box.request([PYTHON, "-S", "-c", PROBE, name], mode=mode, profile="bot")
    request = attrs.evolve(request, cwd=None, env={})  # the agent's own HOME and folder
    result = host.run(request)
    assert result.exit_code == 0, result.stderr.text
    return dict(line.split(" ", 1) for line in result.stdout.text.splitlines())


def test_each_run_gets_a_fresh_home_kept_for_its_steps_and_removed_at_its_end(box, make_host, mode):
    first = make_host(allow_all=True, config=_config(box))
    one = _probe(first, box, "step1", mode)
    home = one["HOME"]
    assert one["FOUND"] == "[]" and os.path.isdir(home)
    assert home.startswith(str(box.home / ".local" / "state" / "stockade" / "homes"))
    assert _probe(first, box, "step2", mode)["FOUND"] == "['step1']"  # the same run
    first.close()
    assert not os.path.exists(home)
    second = make_host(allow_all=True, config=_config(box))
    again = _probe(second, box, "other", mode)
    assert again["HOME"] != home and again["FOUND"] == "[]"


def test_caches_are_kept_between_runs_and_written_only_by_commands_that_write(box, make_host):
    writer = make_host(allow_all=True, config=_config(box))
    wrote = _probe(writer, box, "wheel", "workspace-write")
    assert "CACHE" in wrote and wrote["CACHE"] == "WROTE"
    writer.close()
    reader = make_host(allow_all=True, config=_config(box))
    read = _probe(reader, box, "poison", "read-only")
    assert read["KEPT"] == "['wheel']"  # kept from the other run, and readable
    assert read["cache"].startswith("refused"), read
    cache = box.home / ".local" / "state" / "stockade" / "caches" / "bot" / "pip"
    assert sorted(os.listdir(cache)) == ["wheel"]


def test_a_home_left_by_a_run_that_died_is_removed_by_the_next(box, make_host):
    homes = box.home / ".local" / "state" / "stockade" / "homes"
    homes.mkdir(parents=True)
    (homes / "rdead").mkdir()
    (homes / "rdead" / "left").write_text("x")
    (homes / "rdead.lock").write_text("")
    host = make_host(allow_all=True, config=_config(box))
    _probe(host, box, "x", "read-only")
    assert not (homes / "rdead").exists()
