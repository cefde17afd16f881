"""A layer that deletes a whole real tree (an attack review's findings): a folder removed
(a whiteout), removed and made again (an opaque folder), a file made a folder or a folder a
file. Whatever a person changed in that tree while the command ran (an edit in place, a file
added, a repository made) is a conflict, as an edited file is: nothing of the tree is
deleted, and the command's version is kept aside. The control: the same command with no
change meanwhile lands its deletion."""

from __future__ import annotations

import subprocess
import time

import pytest

from stockade.config.schema import Config


def _run(host, box, source: str, person) -> object:
    """The result of ``source`` run as a task, ``person`` done to the real folder once it
    printed ``started`` (``None``: nothing done)."""
    info = host.start(box.py(source), owner="me")
    deadline = time.monotonic() + 20
    while "started" not in host.read_output(info.task_id, owner="me").stdout:
        assert time.monotonic() < deadline, "the task never started"
        time.sleep(0.02)
    if person is not None:
        person()
    while (done := host.list_tasks(owner="me")[0]).status == "running":
        assert time.monotonic() < deadline, "the task never ended"
        time.sleep(0.05)
    assert done.result is not None, done.error
    return done.result


WAIT = "print('started', flush=True)\ntime.sleep(1)\n"
CASES = {
    # a folder removed; the person edits a file in it
    "whiteout": (
        "import shutil, time\nshutil.rmtree('d')\n" + WAIT,
        lambda ws: (ws / "d" / "a").write_text("a person's"),
        lambda ws: (ws / "d" / "a").read_text() == "a person's",
        lambda ws: not (ws / "d").exists(),
    ),
    # removed and made again; the person adds a file to it
    "opaque": (
        "import os, shutil, time\nshutil.rmtree('d')\nos.mkdir('d')\n"
        "open('d/b', 'w').write('cmd')\n" + WAIT,
        lambda ws: (ws / "d" / "person.txt").write_text("a person's"),
        lambda ws: (ws / "d" / "person.txt").read_text() == "a person's",
        lambda ws: (ws / "d" / "b").read_text() == "cmd" and not (ws / "d" / "a").exists(),
    ),
    # a file made a folder; the person edits the file
    "file-to-folder": (
        "import os, time\nos.remove('notes')\nos.mkdir('notes')\n"
        "open('notes/x', 'w').write('cmd')\n" + WAIT,
        lambda ws: (ws / "notes").write_text("a person's"),
        lambda ws: (ws / "notes").read_text() == "a person's",
        lambda ws: (ws / "notes" / "x").read_text() == "cmd",
    ),
    # a folder made a file; the person edits a file in the folder
    "folder-to-file": (
        "import shutil, time\nshutil.rmtree('d')\nopen('d', 'w').write('cmd')\n" + WAIT,
        lambda ws: (ws / "d" / "a").write_text("a person's"),
        lambda ws: (ws / "d" / "a").read_text() == "a person's",
        lambda ws: (ws / "d").read_text() == "cmd",
    ),
    # a folder removed; the person makes a repository deeper in it
    "repository": (
        "import shutil, time\nshutil.rmtree('d')\n" + WAIT,
        lambda ws: subprocess.run(["git", "init", "-q", str(ws / "d" / "lib")], check=True),
        lambda ws: (ws / "d" / "lib" / ".git" / "HEAD").is_file(),
        lambda ws: not (ws / "d").exists(),
    ),
}


@pytest.mark.sandboxes("bubblewrap")
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("meanwhile", [True, False], ids=["changed", "control"])
def test_a_tree_changed_meanwhile_is_not_deleted(box, make_host, sandbox, case, meanwhile):
    source, change, kept, landed = CASES[case]
    (box.ws / "d" / "lib").mkdir(parents=True)
    (box.ws / "d" / "a").write_text("original")
    (box.ws / "notes").write_text("original")
    time.sleep(0.05)  # older than the command by more than a clock tick
    host = make_host(allow_all=True, config=Config(sandbox=sandbox))
    result = _run(host, box, source, (lambda: change(box.ws)) if meanwhile else None)
    assert result.landed == "landed", result.stderr.text
    if not meanwhile:  # the control: the command's deletion lands
        assert not result.conflicts and landed(box.ws), (case, result.changes)
        return
    assert kept(box.ws), case  # the person's change is there
    assert result.conflicts, case  # what did not conflict lands (the opaque folder's own)


@pytest.mark.sandboxes("bubblewrap")
def test_a_dry_run_lists_what_an_opaque_folder_deletes(box, make_host, sandbox):
    """A folder removed and made again: the dry run lists the files of the real folder that
    landing deletes (it listed only what the command made), as the real landing then
    does (the control)."""
    (box.ws / "src").mkdir()
    for name in ("main.c", "util.c"):
        (box.ws / "src" / name).write_text("original")
    time.sleep(0.05)
    host = make_host(allow_all=True, config=Config(sandbox=sandbox))
    source = (
        "import os, shutil\nshutil.rmtree('src')\nos.mkdir('src')\n"
        "open('src/new.txt', 'w').write('n')"
    )
    dry = host.run(box.py(source, dry_run=True))
    assert dry.landed == "discarded" and dry.changes is not None, dry.stderr.text
    assert dry.changes.created == ("src/new.txt",)
    assert dry.changes.deleted == ("src/main.c", "src/util.c")
    real = host.run(box.py(source))
    assert real.changes is not None and real.changes.deleted == dry.changes.deleted
    assert sorted(p.name for p in (box.ws / "src").iterdir()) == ["new.txt"]


@pytest.mark.sandboxes("bubblewrap")
def test_a_dry_run_lists_what_a_file_for_a_folder_deletes(box, make_host, sandbox):
    """A folder made a file and a file made a folder: the dry run lists the real tree and
    the real file that landing deletes (it said only "modified d"), as the real landing
    then does (the control)."""
    (box.ws / "d" / "sub").mkdir(parents=True)
    for name in ("d/keep.txt", "d/sub/f0", "notes"):
        (box.ws / name).write_text("original")
    time.sleep(0.05)
    host = make_host(allow_all=True, config=Config(sandbox=sandbox))
    source = (
        "import os, shutil\nshutil.rmtree('d')\nopen('d', 'w').write('f')\n"
        "os.remove('notes')\nos.mkdir('notes')\nopen('notes/x', 'w').write('x')"
    )
    dry = host.run(box.py(source, dry_run=True))
    assert dry.changes is not None, dry.stderr.text
    assert dry.changes.deleted == ("d/", "d/keep.txt", "d/sub/", "d/sub/f0", "notes")
    assert dry.changes.created == ("d", "notes/", "notes/x")
    real = host.run(box.py(source))
    assert real.changes is not None
    assert (real.changes.deleted, real.changes.created) == (
        dry.changes.deleted,
        dry.changes.created,
    )
    assert (box.ws / "d").read_text() == "f" and (box.ws / "notes" / "x").read_text() == "x"


def test_a_tree_too_deep_for_a_path_is_kept_not_deleted_unjudged(tmp_path):
    """A real folder whose paths pass ``PATH_MAX`` cannot be listed by its name: what it
    holds cannot be judged, so the tree counts as changed and is not deleted (it was
    passed over, then deleted whole, a change or a ``.git`` at its bottom with it). The
    control: the same tree, shallow, is judged and may go."""
    import os

    from stockade.layers import clearing
    from stockade.layers.rules import Rules

    def tree(top, depth):
        fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
        for _ in range(depth):
            os.mkdir("n" * 240, dir_fd=fd)
            inner = os.open("n" * 240, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(os.open("person.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
        os.close(fd)

    for name, depth in (("deep", 18), ("shallow", 2)):
        (tmp_path / name).mkdir()
        tree(tmp_path / name, depth)
    rules = Rules("/q", since=time.time_ns() + 10**9)  # nothing changed since
    root = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    try:
        assert clearing.kept_by(root, "shallow", str(tmp_path / "shallow"), rules) is None
        kept = clearing.kept_by(root, "deep", str(tmp_path / "deep"), rules)
    finally:
        os.close(root)
    assert kept is not None and kept[0] == "changed"
    from stockade.trees import remove_tree

    remove_tree(str(tmp_path / "deep"))
