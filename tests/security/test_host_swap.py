"""The host's own file operations after a run (quarantine of new protected names, putting back
protected paths under Landlock) run unconfined, as the user. A folder of the workspace
swapped for a symlink (here, to a planted home) must not lead them outside the workspace:
they act through folder descriptors opened without following links from the root, and
record a refusal where a component turned into a link.

Each attack has a control doing the same by path on the same swapped layout, so the test
shows it can see the breach. The race with a process still running (a background task) is
made deterministic by wrapping the listing so the swap lands right after it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stockade.config.schema import Config, PluginsConfig
from stockade.errors import SandboxUnavailable
from stockade.run import beneath, changes, guard, snapshot


@pytest.fixture
def host(make_host, sandbox, box):
    """An allow-all host writing directly (``layers = false``) and, on Landlock, without the
    supervisor: this file attacks the host's check after a direct run, which is what is
    left where the kernel lacks the supervisor. A layered run's commit has its own swap test
    (``tests/test_layers_commit.py``); the supervisor refuses a new protected name while the
    command runs (``tests/security/test_new_names.py``)."""
    del box  # the box sets the private state folder first
    off = PluginsConfig(
        settings={"bubblewrap": {"layers": False}, "landlock": {"supervise": False}}
    )
    return make_host(allow_all=True, config=Config(sandbox=sandbox, plugins=off))


@pytest.fixture
def unsupervised(host_with):
    """A Landlock host without the supervisor: the host puts protected paths back (the
    fallback where the kernel lacks what the supervisor needs)."""
    off = PluginsConfig(settings={"landlock": {"supervise": False}})
    return host_with(Config(sandbox="landlock", plugins=off))


def _swap(box):
    """``ws/sub`` becomes a relative symlink to the planted home (``../home``)."""
    os.rename(box.ws / "sub", box.ws / "sub.old")
    os.symlink("../home", box.ws / "sub")


def _plant_home(box):
    (box.home / ".bashrc").write_text(box.canary)


def _home_intact(box) -> bool:
    path = box.home / ".bashrc"
    return path.is_file() and not path.is_symlink() and path.read_text() == box.canary


def _checks(monkeypatch):
    """What every check after a run returned (its ``failed`` holds the refusals)."""
    real, seen = guard.check, []

    def wrapped(*args, **kwargs):
        seen.append(real(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(guard, "check", wrapped)
    return seen


def _failed(checks) -> str:
    return " ".join(f for g in checks for f in g.failed)


def _quarantined(checks, path, text):
    """``path`` left the workspace for the quarantine, holding ``text``."""
    assert not path.exists()
    done = [g for g in checks if str(path) in g.quarantined]
    assert done and done[0].folder, checks
    assert (Path(done[0].folder) / str(path).lstrip("/")).read_text() == text


def test_control_a_by_path_move_through_the_swap_takes_the_home_file(box):
    (box.ws / "sub").mkdir()
    (box.ws / "sub" / ".bashrc").write_text("planted")
    _plant_home(box)
    _swap(box)
    os.rename(box.ws / "sub" / ".bashrc", box.outside / "moved")  # what a by-path host did
    assert not (box.home / ".bashrc").exists()  # the breach is visible


def test_new_protected_name_swapped_after_listing_leaves_home_alone(host, box, monkeypatch):
    (box.ws / "sub").mkdir()
    _plant_home(box)
    real = guard._appeared
    swapped: list[bool] = []

    def racing(survey):
        found = list(real(survey))
        if not swapped and any(p.endswith("/sub/.bashrc") for p in found):
            _swap(box)
            swapped.append(True)
        yield from found

    monkeypatch.setattr(guard, "_appeared", racing)
    checks = _checks(monkeypatch)
    result = host.run(box.request(["sh", "-c", "echo planted > sub/.bashrc"]))
    assert swapped, result.stderr.text
    assert _home_intact(box), "the host moved the home's .bashrc through the swapped link"
    assert "sub/.bashrc" in _failed(checks) and "symlink" in _failed(checks), checks
    _quarantined(checks, box.ws / "sub.old" / ".bashrc", "planted\n")  # a second look took it


@pytest.mark.sandboxes("landlock")
def test_put_back_does_not_write_through_a_folder_the_command_swapped(
    unsupervised, box, monkeypatch
):
    host = unsupervised
    """Landlock: ``sub/.bashrc`` is put back after the run. The command swaps ``sub`` for a
    link to the home; the host must neither quarantine the home's ``.bashrc`` nor write the
    workspace's ``.bashrc`` there."""
    (box.ws / "sub").mkdir()
    (box.ws / "sub" / ".bashrc").write_text("workspace-content")
    _plant_home(box)
    checks = _checks(monkeypatch)
    script = "mv sub sub.old && ln -s ../home sub && echo done"
    result = host.run(box.request(["sh", "-c", script]))
    assert result.stdout.text == "done\n", result.stderr.text
    assert (box.ws / "sub").is_symlink()  # the swap was made, by the confined command
    assert _home_intact(box), (box.home / ".bashrc").read_text()
    _quarantined(checks, box.ws / "sub.old" / ".bashrc", "workspace-content")
    assert "symlink" in _failed(checks), checks


class _Layout:
    """A workspace beside a planted home, for the host-side listings (no sandbox involved)."""

    def __init__(self, base: Path) -> None:
        self.ws, self.home = base / "ws", base / "home"
        self.ws.mkdir()
        self.home.mkdir()
        self.hidden = "HOME-NAME-" + base.name
        (self.home / self.hidden).write_text("x")
        (self.ws / "sub").mkdir()
        (self.ws / "sub" / "mine").write_text("x")


def _named(listed) -> str:
    return " ".join((*listed.created, *listed.modified, *listed.deleted))


def test_changes_list_names_nothing_beyond_a_folder_swapped_while_listed(tmp_path, monkeypatch):
    """The changes list's first listing meets ``sub`` swapped for a link to the home right
    as it reaches it: no name of the home may appear in the list the agent gets back."""
    lay = _Layout(tmp_path)
    real = changes.Watch._watch
    swapped: list[bool] = []

    def racing(self, path, rel):
        if rel == "sub/" and not swapped:
            _swap(lay)
            swapped.append(True)
        return real(self, path, rel)

    monkeypatch.setattr(changes.Watch, "_watch", racing)
    with changes.Watch(str(lay.ws)) as watch:
        (lay.ws / "made").write_text("new")
        listed = watch.finish()
    assert swapped and "made" in listed.created, listed
    assert lay.hidden not in _named(listed), listed


def test_control_a_by_path_listing_through_the_swap_sees_the_home_names(tmp_path):
    lay = _Layout(tmp_path)
    _swap(lay)
    assert lay.hidden in os.listdir(lay.ws / "sub")  # what the by-path listing did


def test_a_background_task_looping_the_swap_never_leads_the_host_out(host, box, monkeypatch):
    """A real confined process (a background task of the same agent) swaps ``sub`` for a link
    to the home and back, over and over, while runs plant ``sub/.bashrc``. Whenever the swap
    lands, every check after a run acts inside the workspace only. (The window is not
    forced here; the wrapped tests above force it.)"""
    (box.ws / "sub").mkdir()
    _plant_home(box)
    checks = _checks(monkeypatch)
    loop = (
        "i=0; while [ $i -lt 20000 ] && [ ! -e stop ]; do i=$((i+1)); "
        "mv sub sub.x 2>/dev/null && ln -s ../home sub && rm -f sub && mv sub.x sub; done"
    )
    task = host.start(box.request(["sh", "-c", loop]), owner="a")
    try:
        for _ in range(15):
            host.run(box.request(["sh", "-c", "echo planted > sub/.bashrc; true"]))
    finally:
        (box.ws / "stop").write_text("")
        host.kill(task.task_id, owner="a")
    assert _home_intact(box)
    for moved in (p for g in checks for p in g.quarantined):
        assert moved.startswith(str(box.ws) + "/"), moved


@pytest.mark.sandboxes("landlock")
def test_the_snapshot_before_a_run_reads_nothing_beyond_a_folder_swapped_while_read(
    unsupervised, box, monkeypatch
):
    """Landlock snapshots ``sub/.git`` before the run, to put it back after. ``sub`` is
    swapped for a link to a folder outside holding a ``.git`` of secrets while the snapshot
    walks it: the run is refused, and no byte from outside is kept (to be written back into
    the workspace later)."""
    host = unsupervised
    git = box.ws / "sub" / ".git"
    (git / "hooks").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "config").write_text("[core]\n")
    fake = box.outside / "fake" / ".git"
    (fake / "hooks").mkdir(parents=True)
    (fake / "HEAD").write_text("ref: refs/heads/main\n")
    (fake / "config").write_text(box.canary)
    real = snapshot._folder
    swapped: list[bool] = []

    def racing(directory, roots):
        if directory.endswith("/sub/.git") and not swapped:
            os.rename(box.ws / "sub", box.ws / "sub.old")
            os.symlink("../outside/fake", box.ws / "sub")
            swapped.append(True)
        return real(directory, roots)

    monkeypatch.setattr(snapshot, "_folder", racing)
    kept: list[snapshot.Snapshot] = []
    real_take = guard.take
    monkeypatch.setattr(guard, "take", lambda survey: kept.append(real_take(survey)) or kept[-1])
    with pytest.raises(SandboxUnavailable) as refused:
        host.run(box.request(["sh", "-c", "echo ran; touch ran"]))
    assert swapped and "symlink" in str(refused.value), refused.value
    assert not kept  # no snapshot was made to be written back
    assert (fake / "config").read_text() == box.canary


def test_control_a_by_path_walk_through_the_swap_reads_the_secret(box):
    (box.ws / "sub").mkdir()
    (box.outside / "fake").mkdir()
    (box.outside / "fake" / "config").write_text(box.canary)
    os.rename(box.ws / "sub", box.ws / "sub.old")
    os.symlink("../outside/fake", box.ws / "sub")
    assert (box.ws / "sub" / "config").read_text() == box.canary  # what a by-path read got


@pytest.mark.parametrize("resolver", ["openat2", "walk"])
def test_file_tools_never_act_beyond_a_folder_swapped_for_a_link(tmp_path, resolver, monkeypatch):
    """The file tools (run by the host, unconfined) resolve every path from the workspace's
    descriptor: with ``sub`` swapped for a link to the home before the call they refuse,
    and with the swap right after the folder was opened they act in the folder they
    opened (now ``sub.old``), never in the home."""
    from stockade.errors import UsageError
    from stockade.workspace.files import Workspace

    lay = _Layout(tmp_path)
    (lay.home / "notes").write_text("home")
    _swap(lay)
    with Workspace(str(lay.ws), resolver=resolver) as tool:
        for call in (
            lambda: tool.file_write("sub/notes", "pwned"),
            lambda: tool.file_read("sub/notes"),
            lambda: tool.file_list("sub"),
        ):
            with pytest.raises(UsageError):
                call()
    assert (lay.home / "notes").read_text() == "home"
    os.unlink(lay.ws / "sub")
    os.rename(lay.ws / "sub.old", lay.ws / "sub")
    real = Workspace._parent
    swapped: list[bool] = []

    def racing(self, parts, *, make):
        fd = real(self, parts, make=make)
        if not swapped:
            _swap(lay)
            swapped.append(True)
        return fd

    monkeypatch.setattr(Workspace, "_parent", racing)
    with Workspace(str(lay.ws), resolver=resolver) as tool:
        tool.file_write("sub/notes", "mine")
    assert swapped and (lay.home / "notes").read_text() == "home"
    assert (lay.ws / "sub.old" / "notes").read_text() == "mine"


def test_beneath_reaches_a_root_and_what_is_in_it_and_refuses_a_link_on_the_way(tmp_path):
    """The descriptor walk itself: a root (a root inside a protected path is snapshotted
    whole) and a path below it are reached; a link on the way is :class:`Swapped`; a path
    outside every root is refused."""
    lay = _Layout(tmp_path)
    roots = (str(lay.ws),)
    assert beneath.lstat(str(lay.ws), roots).st_ino == os.stat(lay.ws).st_ino
    assert beneath.exists(str(lay.ws / "sub" / "mine"), roots)
    _swap(lay)
    with pytest.raises(beneath.Swapped):
        beneath.lstat(str(lay.ws / "sub" / lay.hidden), roots)
    with pytest.raises(OSError, match="not inside a writable root"):
        beneath.lstat(str(lay.home / lay.hidden), roots)
    moved: list[str] = []
    failed: list[str] = []
    folder = str(tmp_path / "store" / "quarantine" / "a1")
    assert not beneath.move(str(lay.ws / "sub" / lay.hidden), folder, roots, moved, failed)
    assert (lay.home / lay.hidden).exists() and not moved and "symlink" in failed[0]


@pytest.mark.sandboxes("landlock")
def test_a_root_inside_a_protected_path_is_still_put_back_whole(host_with, unsupervised, box):
    """A writable root that lies inside a protected path (here ``.vscode``) is protected
    whole: the descriptor walk reaches the root itself from its parent (without the
    supervisor), or the supervisor refuses both writes while it runs."""
    import attrs

    root = box.ws / ".vscode"
    root.mkdir()
    (root / "tasks.json").write_text("{}")
    script = "echo evil > tasks.json; echo x > new"
    request = attrs.evolve(box.request(["sh", "-c", script]), cwd=str(root))
    result = unsupervised.run(request)
    assert (root / "tasks.json").read_text() == "{}", result
    assert not (root / "new").exists()
    assert str(root / "new") in result.quarantined, result
    supervised = host_with(Config(sandbox="landlock"))
    held = supervised.run(request)  # the supervisor: refused while it runs, nothing to put back
    assert held.stderr.text.count("Read-only file system") == 2, held.stderr.text
    assert (root / "tasks.json").read_text() == "{}" and not (root / "new").exists()
    assert not held.quarantined and not held.restored
