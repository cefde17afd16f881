"""A layered command's choices: ``--dry-run`` lands nothing and lists what it would have
changed; ``commit = "on-success"`` lands only a command that succeeded; a dry run is refused
where writes cannot be layered (Landlock), never run for real."""

from __future__ import annotations

import pytest

from stockade.config.schema import Config
from stockade.errors import SandboxUnavailable
from stockade.request.spec import Profile

WORK = (
    "import os, sys\nopen('new.txt', 'w').write('n')\nos.remove('old.txt')\n"
    "sys.exit(int(sys.argv[1]))"
)


@pytest.mark.sandboxes("bubblewrap")
def test_a_dry_run_lands_nothing_and_says_what_it_would_change(box, make_host, sandbox):
    (box.ws / "old.txt").write_text("old")
    host = make_host(allow_all=True, config=Config(sandbox=sandbox))
    result = host.run(box.py(WORK, "0", dry_run=True))
    assert result.ok and result.landed == "discarded", result.stderr.text
    assert result.changes is not None
    assert (result.changes.created, result.changes.deleted) == (("new.txt",), ("old.txt",))
    assert (box.ws / "old.txt").exists() and not (box.ws / "new.txt").exists()
    real = host.run(box.py(WORK, "0"))  # the control: the same command lands
    assert real.landed == "landed" and (box.ws / "new.txt").exists()
    assert not (box.ws / "old.txt").exists()


@pytest.mark.sandboxes("bubblewrap")
def test_on_success_a_failed_command_lands_nothing(box, make_host, sandbox):
    (box.ws / "old.txt").write_text("old")
    agent = Profile(name="bot", workspace=str(box.ws), commit="on-success")
    host = make_host(allow_all=True, config=Config(sandbox=sandbox, agents={"bot": agent}))
    failed = host.run(box.py(WORK, "3", profile="bot"))
    assert failed.exit_code == 3 and failed.landed == "discarded"
    assert (box.ws / "old.txt").exists() and not (box.ws / "new.txt").exists()
    assert failed.changes is not None and failed.changes.created == ("new.txt",)
    ok = host.run(box.py(WORK, "0", profile="bot"))  # the control
    assert ok.landed == "landed" and (box.ws / "new.txt").exists()


@pytest.mark.sandboxes("landlock")
def test_a_dry_run_is_refused_where_writes_are_direct(box, make_host, sandbox):
    (box.ws / "old.txt").write_text("old")
    host = make_host(allow_all=True, config=Config(sandbox=sandbox))
    with pytest.raises(SandboxUnavailable, match="dry run"):
        host.run(box.py(WORK, "0", dry_run=True))
    assert (box.ws / "old.txt").exists() and not (box.ws / "new.txt").exists()
