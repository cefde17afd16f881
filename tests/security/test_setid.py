"""The kit's setuid, setgid and capability attacks of
:mod:`stockade.conformance.suite.test_setid`, on both providers, and where each one's
writes are direct (bubblewrap with ``layers = false``, Landlock without its supervisor),
with the controls that let the bits through."""

from __future__ import annotations

import json

import pytest

from stockade.config.schema import Config, PluginsConfig
from stockade.confine import seccomp
from stockade.conformance.suite.test_setid import *  # noqa: F403
from stockade.conformance.suite.test_setid import ATTACK, PLANTED, plant, privileged

DIRECT = {
    "bubblewrap": {"bubblewrap": {"layers": False}},
    "landlock": {"landlock": {"supervise": False}},
}
"""Each provider's settings under which a command's writes are direct and nothing of the
supervisor's judges them: only the filter stands between the command and the bits."""


@pytest.mark.parametrize("control", [False, True], ids=["refused", "control"])
def test_direct_writes_make_no_privileged_file(make_host, box, sandbox, monkeypatch, control):
    """Without layers or a supervisor the filter alone refuses every ``chmod`` and create
    with the bits. (The person's own privileged programs can still be rewritten through a
    shared memory map there: Landlock pins it without its supervisor; see the docs.)"""
    if control:  # the filter without the rule: the calls go through, and the bits stay
        real = seccomp.required
        monkeypatch.setattr(seccomp, "required", lambda **kw: real(**{**kw, "setid": True}))
    kept = plant(box.ws)
    config = Config(sandbox=sandbox, plugins=PluginsConfig(settings=DIRECT[sandbox]))
    result = make_host(allow_all=True, config=config).run(box.py(ATTACK))
    assert result.exit_code == 0, result.stderr.text
    assert result.sandbox.writes in (None, "direct"), result.sandbox  # nothing lands later
    out = json.loads(result.stdout.text.splitlines()[-1])
    assert out["control-chmod"] == "done", out
    made = {n: m for n, m in privileged(box.ws, kept).items() if n.split(".")[0] not in kept}
    if control:
        assert {"new0o4755", "old0o6755", "fchmod0o2755", "aclopen"} <= set(made), made
    else:
        assert not made, (made, out)
        for way in ("chmod-new", "chmod-old", "fchmod", "fd-path", "fchmodat", "open"):
            assert out[f"{way}-0o4755"] == "Operation not permitted", (way, out)


def test_a_folder_keeps_its_setgid_bit(host, box):
    """Under the defaults (bubblewrap's layers, Landlock's supervisor) a folder made setgid
    keeps the bit: it only names the group of what is made in it."""
    script = "import os; os.mkdir('shared'); os.chmod('shared', 0o2775); print('ok')"
    result = host.run(box.py(script))
    assert result.stdout.text == "ok\n", result.stderr.text
    assert (box.ws / "shared").stat().st_mode & 0o7777 == 0o2775


def test_a_supervised_o_tmpfile_gets_the_mode_asked_for(host, box):
    """The supervisor made an ``O_TMPFILE`` with ``0666`` less the umask, whatever mode
    the command asked for: a file meant to be private (``0600``) came out ``0644``."""
    script = """import os
here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
for where in (".", f"/proc/self/fd/{here}"):  # (the second: the supervisor's own-fd path)
    for mode in (0o600, 0o640, 0o4755):
        fd = os.open(where, os.O_TMPFILE | os.O_WRONLY, mode)
        os.write(fd, b"x")  # (the kernel drops a setuid bit at a file's first write)
        print(oct(os.fstat(fd).st_mode & 0o7777))"""
    result = host.run(box.py(script))
    assert result.stdout.text.split() == ["0o600", "0o640", "0o755"] * 2, result.stderr.text


def test_the_persons_program_may_keep_or_lose_its_bits_never_gain_one(host, box, sandbox):
    """``chmod go-w`` of the person's setuid program keeps its bit (the mode names it), and
    ``chmod u-s`` drops it: both work. Adding setgid is refused under Landlock; under
    bubblewrap it happens in the layer, and the landing clears every bit of what it brings
    (a program the command touched lands without them)."""
    (box.ws / "tool").write_bytes(b"#!/bin/sh\n")
    (box.ws / "tool").chmod(0o4755)
    script = """import os
for mode in (0o4750, 0o6750, 0o750):
    try:
        os.chmod("tool", mode)
        print("done")
    except PermissionError:
        print("refused")"""
    result = host.run(box.py(script))
    refused = "refused" if sandbox == "landlock" else "done"
    assert result.stdout.text.split() == ["done", refused, "done"], result.stderr.text
    assert (box.ws / "tool").stat().st_mode & 0o7777 == 0o750


def test_every_planted_program_is_privileged():
    assert all(mode & 0o6000 for mode in PLANTED.values())
