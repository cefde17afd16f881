"""A layered command's choices: ``--dry-run`` lands nothing and lists what it would have
changed; ``commit = "on-success"`` lands only a command that succeeded; a dry run is refused
where writes cannot be layered (Landlock), never run for real."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from stockade.config.schema import Config, PluginsConfig
from stockade.errors import SandboxUnavailable
from stockade.request.spec import Profile
from stockade.testing import EventLog

WORK = (
    "import os, sys\nopen('new.txt', 'w').write('n')\nos.remove('old.txt')\n"
    "sys.exit(int(sys.argv[1]))"
)


@pytest.mark.sandboxes("bubblewrap")
def test_a_dry_run_lands_nothing_and_says_what_it_would_change(box, make_host, sandbox):
    (box.ws / "old.txt").write_text("old")
    host = make_host(allow_all=True, config=Config(sandbox=sandbox))
    planting = WORK.replace("import os, sys", "import os, sys\nos.makedirs('.vscode')")
    result = host.run(box.py(planting, "0", dry_run=True))
    assert result.ok and result.landed == "discarded", result.stderr.text
    assert result.changes is not None
    assert (result.changes.created, result.changes.deleted) == (("new.txt",), ("old.txt",))
    assert result.changes.withheld == (str(box.ws / ".vscode") + "/",)  # would be quarantined
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


@pytest.mark.sandboxes("bubblewrap")
def test_two_commands_on_one_root_the_later_commit_keeps_its_version_aside(box, make_host, sandbox):
    (box.ws / "shared.txt").write_text("original")
    log = EventLog()
    host = make_host(allow_all=True, config=Config(sandbox=sandbox), plugins=[log])
    slow_src = (
        "import time\ntime.sleep(1.5)\n"
        "open('shared.txt', 'w').write('slow')\nopen('only-slow.txt', 'w').write('s')"
    )
    results = {}
    slow = threading.Thread(target=lambda: results.update(slow=host.run(box.py(slow_src))))
    slow.start()
    time.sleep(0.5)  # the fast one starts after the slow one, and lands first
    fast = host.run(box.py("open('shared.txt', 'w').write('fast')"))
    slow.join()
    late = results["slow"]
    assert fast.landed == late.landed == "landed" and not fast.conflicts
    assert (box.ws / "shared.txt").read_text() == "fast"  # never a mix, never overwritten
    assert (box.ws / "only-slow.txt").read_text() == "s"  # what did not conflict landed
    assert late.conflicts == (str(box.ws / "shared.txt"),)
    events = [e for e in log.events if e.kind == "conflict"]
    assert [(e.action_id, e.rivals) for e in events] == [(late.action_id, (fast.action_id,))]
    assert events[0].folder is not None
    kept = os.path.join(events[0].folder, "conflicts", str(box.ws / "shared.txt").lstrip("/"))
    assert Path(kept).read_text() == "slow"


@pytest.mark.sandboxes("bubblewrap")
def test_a_file_written_just_before_a_run_is_not_a_conflict(box, make_host, sandbox):
    """A harness writes a file and runs a step on it at once, over and over: the step's
    version lands every time (the layers begin on the filesystem's own stamps,
    :mod:`stockade.layers.clock`); a fixed margin under the fine clock kept it aside."""
    host = make_host(allow_all=True, config=Config(sandbox=sandbox))
    for round_ in range(25):
        (box.ws / "step.txt").write_text(f"harness {round_}")
        result = host.run(box.py("open('step.txt', 'a').write(' step')"))
        assert result.landed == "landed" and not result.conflicts, round_
        assert (box.ws / "step.txt").read_text() == f"harness {round_} step"


@pytest.mark.sandboxes("bubblewrap")
def test_every_writable_root_is_layered_and_checked(box, make_host, sandbox):
    second = box.root / "second"
    second.mkdir()
    settings = {"bubblewrap": {"writable_roots": [str(second)]}}
    config = Config(sandbox=sandbox, plugins=PluginsConfig(settings=settings))
    host = make_host(allow_all=True, config=config)
    source = (
        "import os, sys\nopen('a.txt', 'w').write('a')\n"
        "open(os.path.join(sys.argv[1], 'b.txt'), 'w').write('b')\n"
        "os.makedirs(os.path.join(sys.argv[1], 'x', '.vscode'))\n"
        "open(os.path.join(sys.argv[1], 'x', '.vscode', 'tasks.json'), 'w').write('{}')\n"
    )
    result = host.run(box.py(source, str(second)))
    assert result.ok and result.landed == "landed", result.stderr.text
    assert (box.ws / "a.txt").read_text() == "a" and (second / "b.txt").read_text() == "b"
    assert result.quarantined == (str(second / "x" / ".vscode"),)
    assert not (second / "x" / ".vscode").exists()


@pytest.mark.sandboxes("bubblewrap")
def test_a_dry_run_says_what_it_would_quarantine_and_keep_aside(box, make_host, sandbox):
    from stockade.cli.run import landing_lines

    (box.ws / "shared.txt").write_text("original")
    time.sleep(0.05)  # older than the command by more than a clock tick
    host = make_host(allow_all=True, config=Config(sandbox=sandbox))
    source = (
        "import os, time\nos.makedirs('sub/.git/hooks')\n"
        "open('sub/.git/hooks/pre-commit', 'w').write('boom')\n"
        "open('.envrc', 'w').write('boom')\nprint('started', flush=True)\ntime.sleep(1)\n"
        "open('shared.txt', 'w').write('mine')"
    )
    result = _changed_while_it_runs(host, box.py(source, dry_run=True), box.ws / "shared.txt")
    assert result.landed == "discarded" and result.changes is not None, result.stderr.text
    assert result.changes.withheld == (str(box.ws / ".envrc"), str(box.ws / "sub/.git") + "/")
    assert result.changes.conflicts == (str(box.ws / "shared.txt"),)
    assert result.changes.created == ("sub/",)  # the folder would land; what it holds would not
    lines = landing_lines(result)
    assert f"would quarantine {box.ws / '.envrc'}" in lines
    assert f"would keep aside {box.ws / 'shared.txt'}" in lines
    assert (box.ws / "shared.txt").read_text() == "a person's" and not (box.ws / "sub").exists()


@pytest.mark.sandboxes("bubblewrap")
def test_a_writable_root_inside_another_is_a_layer_of_its_own(box, make_host, sandbox):
    inner = box.ws / "inner"
    inner.mkdir()
    (inner / "old.txt").write_text("old")
    time.sleep(0.05)  # older than the command by more than a clock tick
    settings = {"bubblewrap": {"writable_roots": [str(inner)]}}
    config = Config(sandbox=sandbox, plugins=PluginsConfig(settings=settings))
    host = make_host(allow_all=True, config=config)
    source = (
        "import os, time\nopen('a.txt', 'w').write('a')\n"
        "open('inner/b.txt', 'w').write('b')\nopen('inner/old.txt', 'w').write('new')\n"
        "os.makedirs('inner/deep/.vscode')\n"
        "open('inner/deep/.vscode/tasks.json', 'w').write('{}')\n"
        "print('ready', flush=True)\ntime.sleep(1)\n"
    )
    info = host.start(box.py(source), owner="me")  # a task: its output is read as it runs
    deadline = time.monotonic() + 20
    while "ready" not in host.read_output(info.task_id, owner="me").stdout:
        assert time.monotonic() < deadline, "the task never got to its writes"
        time.sleep(0.02)
    for _ in range(10):  # it has written them, and sleeps: none is in the real folder
        assert not (inner / "b.txt").exists() and not (inner / "deep").exists()
        assert (inner / "old.txt").read_text() == "old" and not (box.ws / "a.txt").exists()
        time.sleep(0.02)
    deadline = time.monotonic() + 20
    while (done := host.list_tasks(owner="me")[0]).status == "running":
        assert time.monotonic() < deadline, "the task never ended"
        time.sleep(0.05)
    result = done.result
    assert result is not None
    assert result.ok and result.landed == "landed", result.stderr.text
    assert result.sandbox.writes == "layered"
    assert (box.ws / "a.txt").read_text() == "a" and (inner / "b.txt").read_text() == "b"
    assert (inner / "old.txt").read_text() == "new"
    assert result.quarantined == (str(inner / "deep" / ".vscode"),)
    assert not (inner / "deep" / ".vscode").exists()
    dry = host.run(box.py("open('inner/c.txt', 'w').write('c')", dry_run=True))
    assert dry.changes is not None and dry.changes.created == ("inner/c.txt",)
    assert not (inner / "c.txt").exists()


def _changed_while_it_runs(host, request, path):
    """The result of ``request`` run as a task, ``path`` rewritten by a person once it
    printed ``started`` (so after it started: a rival change)."""
    info = host.start(request, owner="me")
    deadline = time.monotonic() + 20
    while "started" not in host.read_output(info.task_id, owner="me").stdout:
        assert time.monotonic() < deadline, "the task never started"
        time.sleep(0.02)
    path.write_text("a person's")
    while (done := host.list_tasks(owner="me")[0]).status == "running":
        assert time.monotonic() < deadline, "the task never ended"
        time.sleep(0.05)
    assert done.result is not None, done.error
    return done.result
