"""An agent's run home and package caches under the provider: its own are there (the home
writable in every mode, the caches only in ``workspace-write``), another run's home and
another agent's caches, beside them in Stockade's hidden store, are not.

The homes and caches are made by the host (:mod:`stockade.workspace.folders`); what is
attacked here is what the provider does with ``spec.home`` and ``spec.caches``. Each canary
is read by the test itself first (the control: it is there to be stolen).
"""

from __future__ import annotations

import json
import os

import attrs
import pytest

from stockade.config.schema import Config, StoreConfig
from stockade.confine.promises import Promise
from stockade.conformance.ground import PYTHON
from stockade.request.spec import Profile

# argv: [name to write in the home, then pairs of (verb, path)]; prints one JSON object.
PROBE = """
import errno, json, os, sys
home = os.environ['HOME']
out = {'home': home, 'found': sorted(os.listdir(home)), 'cache': os.environ['PIP_CACHE_DIR']}
try:
    open(os.path.join(home, sys.argv[1]), 'w').write('mine')
    out['home-write'] = 'ok'
except OSError as e:
    out['home-write'] = errno.errorcode.get(e.errno, str(e.errno))
args = sys.argv[2:]
for verb, path in zip(args[::2], args[1::2]):
    try:
        if verb == 'read':
            out[verb + ' ' + path] = open(path).read()
        else:
            open(path, 'w').write('planted')
            out[verb + ' ' + path] = 'ok'
    except OSError as e:
        out[verb + ' ' + path] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
"""

REFUSED = {"EACCES", "EPERM", "EROFS", "ENOENT"}
"""How a path the command must not reach may fail: refused, or not there at all."""


def _config(box, agent: str = "bot") -> Config:
    store = box.root / "store"
    return Config(
        sandbox=box.sandbox,
        store=StoreConfig(str(store / "store.db")),
        agents={agent: Profile(name=agent)},
    )


def _probe(host, box, mode, name, *attacks: str, agent: str = "bot") -> dict[str, object]:
    request = box.request([PYTHON, "-S", "-c", PROBE, name, *attacks], mode=mode, profile=agent)
    request = attrs.evolve(request, cwd=None, env={})  # the agent's own HOME and folder
    result = host.run(request)
    assert result.exit_code == 0, result.stderr.text
    return dict(json.loads(result.stdout.text))


@pytest.mark.promise(Promise.RUN_HOME)
def test_the_run_home_is_writable_and_kept_for_the_run_and_another_runs_is_out_of_reach(
    make_host, box, mode
):
    first = make_host(allow_all=True, config=_config(box))
    one = _probe(first, box, mode, "step1")
    home = str(one["home"])
    assert one["found"] == [] and one["home-write"] == "ok", one  # writable in every mode
    assert _probe(first, box, mode, "step2")["found"] == ["step1"]  # the same run's home
    canary = os.path.join(home, "canary")
    with open(canary, "w") as f:
        f.write(box.canary)
    with open(canary) as f:  # the control: there, readable by the host
        assert f.read() == box.canary
    # A second run, live at the same time: its own home, and the first one's out of reach.
    second = make_host(allow_all=True, config=_config(box))
    planted = os.path.join(home, "planted")
    two = _probe(second, box, mode, "other", "read", canary, "write", planted, "read", home)
    assert two["home"] != home and two["found"] == [] and two["home-write"] == "ok", two
    assert box.canary not in json.dumps(two)
    assert two["read " + canary] in REFUSED and two["write " + planted] in REFUSED, two
    assert not os.path.exists(planted)
    assert sorted(os.listdir(home)) == ["canary", "step1", "step2"]


@pytest.mark.promise(Promise.CACHES)
def test_caches_are_read_in_every_mode_written_only_in_workspace_write_and_kept_apart(
    make_host, box, mode
):
    config = _config(box)
    caches = box.root / "store" / "caches"
    own, other = caches / "bot" / "pip", caches / "someone" / "pip"
    for folder in (own, other):
        folder.mkdir(parents=True, mode=0o700)
        (folder / "wheel").write_text(box.canary)
    assert (other / "wheel").read_text() == box.canary  # the control: there to be stolen
    host = make_host(allow_all=True, config=config)
    got = _probe(
        host,
        box,
        mode,
        "x",
        "read",
        str(own / "wheel"),
        "write",
        str(own / "new"),
        "read",
        str(other / "wheel"),
        "write",
        str(other / "new"),
    )
    assert os.path.realpath(str(got["cache"])) == os.path.realpath(own)
    assert got["read " + str(own / "wheel")] == box.canary, got  # its own: kept, readable
    if mode == "workspace-write":
        assert got["write " + str(own / "new")] == "ok", got
        assert (own / "new").read_text() == "planted"
    else:
        assert got["write " + str(own / "new")] in REFUSED - {"ENOENT"}, got
        assert not (own / "new").exists()
    assert got["read " + str(other / "wheel")] in REFUSED, got
    assert got["write " + str(other / "new")] in REFUSED, got
    assert not (other / "new").exists()
    assert sorted(os.listdir(other)) == ["wheel"]
