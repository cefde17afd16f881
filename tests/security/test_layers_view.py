"""A running task's view: the file tools read its layer over the folder, by its task id.

While a layered background task runs, the real folder has none of its writes (a person
sees the folder as it was); the view shows them as the task sees them: new and changed files,
deletions hidden, an opaque folder without what was below. The task writes into the folder
the view reads while it is read: a name it swaps for a symlink to a folder outside is refused,
never followed (the attack races it; the control, a plain path join, reads the canary).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from stockade.cli.commands import main
from stockade.config.schema import Config
from stockade.errors import UsageError
from stockade.layers.view import of_task

WORK = (
    "import os, shutil, time\n"
    "open('new.txt', 'w').write('n')\nopen('old.txt', 'w').write('changed')\n"
    "os.remove('gone.txt')\nshutil.rmtree('keep')\nos.mkdir('keep')\n"
    "open('keep/fresh', 'w').write('f')\nos.symlink('/etc/hostname', 'link')\n"
    "open('ready', 'w').write('r')\ntime.sleep(30)\n"
)


def _wait(view, name, seconds=20.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            return view.file_read(name)
        except UsageError:
            time.sleep(0.05)
    raise AssertionError(f"{name} never appeared in the task's view")


@pytest.mark.sandboxes("bubblewrap")
def test_the_file_tools_read_a_running_tasks_view_by_its_id(
    box, make_host, sandbox, monkeypatch, capsys
):
    (box.ws / "old.txt").write_text("old")
    (box.ws / "gone.txt").write_text("g")
    (box.ws / "keep").mkdir()
    (box.ws / "keep" / "below").write_text("b")
    host = make_host(allow_all=True, config=Config(sandbox=sandbox))
    info = host.start(box.py(WORK), owner="me")
    try:
        view = of_task(host, info.task_id, owner="me", root=str(box.ws))
        _wait(view, "ready")
        assert view.file_read("new.txt").text == "n"
        assert view.file_read("old.txt").text == "changed"
        names = {e.name: e.kind for e in view.file_list(".").entries}
        assert {"new.txt", "old.txt", "keep", "link", "ready"} <= set(names)
        assert "gone.txt" not in names and names["link"] == "symlink"
        assert [e.name for e in view.file_list("keep").entries] == ["fresh"]  # opaque
        for hidden in ("gone.txt", "keep/below", "link"):
            with pytest.raises(UsageError):
                view.file_read(hidden)
        # A person meanwhile: the real folder as it was, none of the task's writes.
        assert (box.ws / "old.txt").read_text() == "old" and not (box.ws / "new.txt").exists()
        assert (box.ws / "keep" / "below").exists() and (box.ws / "gone.txt").exists()
        # The command line reads the same view by the task's action id.
        monkeypatch.chdir(box.ws)
        assert main(["--no-server", "file", "read", "--view", info.action_id, "new.txt"]) == 0
        assert capsys.readouterr().out == "n"
        assert main(["--no-server", "file", "read", "new.txt"]) != 0  # the folder: not there
        with pytest.raises(UsageError, match="no running task"):
            of_task(host, "task-999", owner="me", root=str(box.ws))
        with pytest.raises(UsageError, match="no running task"):
            of_task(host, info.task_id, owner="someone else", root=str(box.ws))
    finally:
        host.kill(info.task_id, owner="me")
    with pytest.raises(UsageError, match="no running task"):
        of_task(host, info.task_id, owner="me", root=str(box.ws))
    assert (box.ws / "new.txt").read_text() == "n"  # it landed when it ended


RACE = (
    "import os, sys, time\n"
    "os.makedirs('d')\nopen('d/f', 'w').write('mine')\nopen('ready', 'w').write('r')\n"
    "end = time.monotonic() + 6\n"
    "while time.monotonic() < end:\n"
    "    os.rename('d', 'd.real')\n    os.symlink(sys.argv[1], 'd')\n"
    "    os.unlink('d')\n    os.rename('d.real', 'd')\n"
)


@pytest.mark.sandboxes("bubblewrap")
def test_a_folder_swapped_for_a_symlink_while_it_is_read_is_never_followed(box, make_host, sandbox):
    outside = box.root / "elsewhere"
    outside.mkdir()
    (outside / "f").write_text("CANARY")
    host = make_host(allow_all=True, config=Config(sandbox=sandbox))
    # The command cannot see `outside`; inside its sandbox the symlink dangles. Outside, the
    # host reading its upper folder by path would follow it.
    info = host.start(box.py(RACE, str(outside)), owner="me")
    try:
        view = of_task(host, info.task_id, owner="me", root=str(box.ws))
        upper = view.layer.upper
        _wait(view, "ready")
        seen, naive, deadline = set(), set(), time.monotonic() + 4
        while time.monotonic() < deadline and not ("CANARY" in naive and len(seen) > 1):
            try:
                seen.add(view.file_read("d/f").text)
            except UsageError:
                seen.add("refused")
            with contextlib.suppress(OSError):
                naive.add(Path(upper, "d", "f").read_text())
        assert "CANARY" not in seen and "mine" in seen
        assert "CANARY" in naive  # the control: a path join follows the swapped name
    finally:
        host.kill(info.task_id, owner="me")
