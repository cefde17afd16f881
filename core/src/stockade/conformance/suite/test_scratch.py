"""Each run's scratch (``TMPDIR``, or the private ``/tmp``) is its own: a run cannot read,
copy, link or write what another run keeps there, while that run is still going.

A provider may give every run a private ``/tmp`` (bubblewrap), or a folder of one shared
parent on the host with rules that grant each run only its own (Landlock): then the
attacker must not change the other run's folder either.
"""

from __future__ import annotations

import os
import secrets
import time

import pytest

from stockade.confine.promises import Promise
from stockade.conformance import procs

# The holder: its canary in its scratch, where it is (for the attacker), then it waits for
# the word and reads its own canary back (the control).
HOLD = """
import os, sys, time
scratch = os.environ.get("TMPDIR") or "/tmp"
path = os.path.join(scratch, "canary")
open(path, "w").write(sys.argv[1])
print("WHERE", path, flush=True)  # (a layered run's files are not seen while it runs)
deadline = time.monotonic() + 8
while not os.path.exists("work/go") and time.monotonic() < deadline:
    time.sleep(0.05)
print("OWN", open(path).read())
"""

# The attacker: every road to the other run's canary it can think of.
ATTACK = """
import os, shutil, sys
path = sys.argv[1]
mine = os.environ.get("TMPDIR") or "/tmp"
def attempt(name, action):
    try:
        print(name, repr(action()))
    except OSError as error:
        print(name, "refused", error.errno)
attempt("read", lambda: open(path).read())
attempt("copy", lambda: shutil.copy(path, os.path.join(mine, "copied")) and
        open(os.path.join(mine, "copied")).read())
def link():
    os.link(path, os.path.join(mine, "linked"))
    return open(os.path.join(mine, "linked")).read()
attempt("hardlink", link)
def symlink():
    os.symlink(path, os.path.join(mine, "sym"))
    return open(os.path.join(mine, "sym")).read()
attempt("symlink", symlink)
attempt("overwrite", lambda: open(path, "w").write("planted"))
attempt("plant", lambda: open(os.path.join(os.path.dirname(path), "planted"), "w").write("x"))
attempt("remove", lambda: os.unlink(path))
open(os.path.join(mine, "own"), "w").write("mine")
print("OWN", open(os.path.join(mine, "own")).read())
"""


@pytest.mark.promise(Promise.PRIVATE_SCRATCH)
def test_a_run_cannot_reach_the_scratch_of_a_background_run(host, box):
    (box.ws / "work").mkdir()
    holder = host.start(box.py(HOLD, box.canary), owner="test")
    try:
        said: list[str] = []

        def told() -> bool:
            said.append(host.read_output(holder.task_id, owner="test").stdout)
            return "\n" in "".join(said)

        assert procs.wait_until(told, timeout=30), said
        where = "".join(said).split("\n")[0].removeprefix("WHERE ")
        shared = os.path.isfile(where)  # the holder's scratch is a folder on the host
        if shared:
            with open(where) as planted:
                assert planted.read() == box.canary
        attack = host.run(box.py(ATTACK, where))
        assert attack.exit_code == 0, attack.stderr.text
        out = attack.stdout.text
        assert box.canary not in out, out
        lines = dict(line.split(" ", 1) for line in out.splitlines())
        for name in ("read", "copy", "hardlink", "symlink"):
            assert lines[name].startswith("refused"), (name, out)
        if shared:  # (with a private /tmp, the attacker writes its own)
            for name in ("overwrite", "plant", "remove"):
                assert lines[name].startswith("refused"), (name, out)
        assert lines["OWN"] == "mine"  # its own scratch works
        (box.ws / "work" / "go").touch()
        deadline = time.monotonic() + 60
        info = host.tasks.list("test")[0]
        while info.status == "running" and time.monotonic() < deadline:
            time.sleep(0.05)
            info = host.tasks.list("test")[0]
        assert info.result is not None, info
        # The control: the holder reads its own canary, still whole.
        assert info.result.stdout.text.endswith(f"OWN {box.canary}\n"), info.result.stderr.text
    finally:
        (box.ws / "work" / "go").touch()
    if shared:
        assert not os.path.exists(os.path.join(os.path.dirname(where), "planted"))


@pytest.mark.promise(Promise.PRIVATE_SCRATCH)
def test_the_scratch_parent_lists_but_grants_nothing_else(host, box):
    """The folder of a run's scratch takes no new entry: a shared parent is only listable
    (EACCES), a private ``/tmp`` lies in a read-only root (EROFS)."""
    probe = (
        "import os, sys\n"
        "mine = os.environ.get('TMPDIR') or '/tmp'\n"
        "parent = os.path.dirname(mine)\n"
        "try:\n"
        "    os.mkdir(os.path.join(parent, sys.argv[1]))\n"
        "    print('made')\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
        "open(os.path.join(mine, 'f'), 'w').write('x')\n"
        "print('own', open(os.path.join(mine, 'f')).read())\n"
    )
    # A name of its own: a fixed one may exist there already (and be refused as EEXIST).
    result = host.run(box.py(probe, "kit-" + secrets.token_hex(6)))
    assert result.exit_code == 0, result.stderr.text
    first, second = result.stdout.text.splitlines()
    assert first in ("refused 1", "refused 13", "refused 30"), first
    assert second == "own x"
