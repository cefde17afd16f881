"""Forks mounted as overlays (:mod:`stockade.layers.mounts`): one mount whatever the size;
whatever a command does in one fork (layered or direct) reaches neither the snapshot nor a
sibling, which a fork of hard links would let a direct writer spoil (the control); a commit
lands through the mount; a hook planted in the snapshot stays protected in a fork as in a
real folder; discard unmounts, busy or not; a mount a killed process left is swept; the
fallback is taken, and says why, where no overlay can be mounted."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import stockade
from stockade.config.schema import Config, store_folder
from stockade.errors import SandboxUnavailable, UsageError
from stockade.layers import Rules, journal, mounts, place, snapshots
from stockade.request.spec import ExecRequest

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="an overlay fork is root's")
HOOK = "#!/bin/sh\necho canary-hook\n"
# Every way a command may change a file it did not make: in place, by name, its metadata.
ATTACK = (
    "printf X | dd of=a.txt conv=notrunc status=none; "  # in place, no truncation
    "echo more >> b.txt; "  # appended
    ": > c.txt; "  # truncated
    "rm d.txt; "  # deleted
    "mv e.txt e2.txt; "  # renamed
    "chmod 777 f.txt; "  # its mode
    "touch -d 2001-01-01 g.txt; "  # its times
    "ln h.txt h2.txt && echo through-link >> h2.txt; "  # a hard link made, written
    "rm -r sub; "  # a folder with its files
    "ln -sf /etc/passwd i.txt; "  # replaced by a link
    "echo new > new.txt"
)
FILES = ("a.txt", "b.txt", "c.txt", "d.txt", "e.txt", "f.txt", "g.txt", "h.txt", "i.txt")


def _tree(folder: str) -> dict[str, tuple[int, int, int, str]]:
    """Each entry below ``folder``: mode, size, content time, and its content's digest."""
    found = {}
    for directory, folders, files in os.walk(folder):
        for name in (*folders, *files):
            path = os.path.join(directory, name)
            info = os.lstat(path)
            digest = ""
            if os.path.isfile(path) and not os.path.islink(path):
                digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            key = os.path.relpath(path, folder)
            found[key] = (info.st_mode, info.st_size, info.st_mtime_ns, digest)
    return found


def _seed(folder: Path) -> None:
    for name in FILES:
        (folder / name).write_text(f"{name}\n")
    (folder / "sub").mkdir()
    (folder / "sub" / "inner.txt").write_text("inner\n")
    for repository in (".git", "notgit"):
        hooks = folder / repository / "hooks"
        hooks.mkdir(parents=True)
        (folder / repository / "HEAD").write_text("ref: refs/heads/main\n")
        (hooks / "pre-commit").write_text(HOOK)


@pytest.fixture
def store() -> str:
    return store_folder(Config())


@pytest.fixture
def links(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forks made of hard links, as where no overlay can be mounted."""
    monkeypatch.setattr(mounts, "refusal", lambda store: "asked for links by the test")


@ROOT_ONLY
def test_an_overlay_fork_is_one_mount_and_sees_the_snapshot(tmp_path, store):
    _seed(tmp_path)
    snap = snapshots.take(str(tmp_path), store=store)
    made = snapshots.fork_one(snap, store=store)
    assert (made.method, made.why) == ("overlay", "")
    assert mounts.is_overlay(made.folder)
    assert _tree(made.folder) == _tree(snap.folder)
    assert os.stat(made.folder).st_mode == os.stat(snap.folder).st_mode
    assert snapshots.overlaid(os.path.join(made.folder, "sub"), store=store)
    snapshots.discard(snap, store=store)
    assert not mounts.overlays_beneath(store)


@ROOT_ONLY
@pytest.mark.parametrize("sandbox", ["bubblewrap", "landlock"])
def test_nothing_done_in_a_fork_reaches_the_snapshot_or_a_sibling(
    tmp_path, store, make_host, sandbox
):
    _seed(tmp_path)
    snap = snapshots.take(str(tmp_path), store=store)
    first, second = snapshots.fork(snap, 2, store=store)
    before_snap, before_sibling = _tree(snap.folder), _tree(second)
    host = make_host(allow_all=True, config=Config(sandbox=sandbox))
    result = host.run(ExecRequest(["sh", "-c", ATTACK], first, workspace=first))
    assert result.exit_code == 0, result.stderr.text
    assert result.sandbox.writes == ("layered" if sandbox == "bubblewrap" else None)
    fork = Path(first)
    # The command did it all, in its fork.
    assert fork.joinpath("a.txt").read_text() == "X.txt\n"
    assert fork.joinpath("b.txt").read_text() == "b.txt\nmore\n"
    assert fork.joinpath("c.txt").read_text() == ""
    assert not fork.joinpath("d.txt").exists() and not fork.joinpath("sub").exists()
    assert fork.joinpath("e2.txt").exists() and not fork.joinpath("e.txt").exists()
    assert os.stat(fork / "f.txt").st_mode & 0o777 == 0o777
    assert os.readlink(fork / "i.txt") == "/etc/passwd"
    assert fork.joinpath("h.txt").read_text() == "h.txt\nthrough-link\n"
    # The canaries: neither the snapshot nor the sibling moved, by a byte or a mode.
    assert _tree(snap.folder) == before_snap
    assert _tree(second) == before_sibling
    snapshots.discard(snap, store=store)


@pytest.mark.usefixtures("links")
def test_the_control_a_direct_writer_in_a_fork_of_links_spoils_the_snapshot(
    tmp_path, store, make_host, monkeypatch
):
    """What the test above would see of a breach: with the refusal taken away, a direct
    writer in a fork of hard links changes the snapshot and the sibling."""
    _seed(tmp_path)
    snap = snapshots.take(str(tmp_path), store=store)
    first, second = snapshots.fork(snap, 2, store=store)
    assert not snapshots.overlaid(first, store=store)
    before_snap = _tree(snap.folder)
    monkeypatch.setattr(snapshots, "refuse_direct", lambda *args: None)
    host = make_host(allow_all=True, config=Config(sandbox="landlock"))
    host.run(ExecRequest(["sh", "-c", ATTACK], first, workspace=first))
    assert _tree(snap.folder) != before_snap
    assert Path(snap.folder, "a.txt").read_text() == "X.txt\n"
    assert Path(second, "b.txt").read_text() == "b.txt\nmore\n"
    snapshots.discard(snap, store=store)


@pytest.mark.usefixtures("links")
def test_a_fork_of_links_still_refuses_a_direct_writer(tmp_path, store, make_host):
    _seed(tmp_path)
    snap = snapshots.take(str(tmp_path), store=store)
    made = snapshots.fork_one(snap, store=store)
    assert (made.method, made.why) == ("links", "asked for links by the test")
    host = make_host(allow_all=True, config=Config(sandbox="landlock"))
    with pytest.raises(SandboxUnavailable, match="hard links"):
        host.run(ExecRequest(["sh", "-c", ATTACK], made.folder, workspace=made.folder))
    snapshots.discard(snap, store=store)


@ROOT_ONLY
def test_a_layered_commit_lands_through_the_mount(tmp_path, store, make_host):
    _seed(tmp_path)
    snap = snapshots.take(str(tmp_path), store=store)
    fork = snapshots.fork_one(snap, store=store).folder
    host = make_host(allow_all=True, config=Config(sandbox="bubblewrap"))
    script = "rm a.txt; echo made > made.txt; mkdir -p deep/er; echo x > deep/er/y; ln -s b.txt l"
    result = host.run(ExecRequest(["sh", "-c", script], fork, workspace=fork))
    assert result.landed == "landed"
    assert result.changes is not None
    assert result.changes.deleted == ("a.txt",)
    assert set(result.changes.created) >= {"made.txt", "deep/er/y", "l"}
    assert Path(fork, "made.txt").read_text() == "made\n"
    assert os.readlink(Path(fork, "l")) == "b.txt"
    assert not Path(fork, "a.txt").exists()
    upper = Path(store, mounts.LAYERS, snap.id, os.path.basename(fork), "upper")
    assert os.stat(upper / "a.txt").st_rdev == 0  # the kernel's whiteout, in the fork's own
    assert not [n for n in os.listdir(fork) if n.startswith(".stockade-landing-")]
    assert Path(snap.folder, "a.txt").read_text() == "a.txt\n"
    snapshots.discard(snap, store=store)


@ROOT_ONLY
@pytest.mark.parametrize("sandbox", ["bubblewrap", "landlock"])
def test_a_hook_in_the_snapshot_is_protected_in_a_fork_as_in_a_folder(
    tmp_path, store, make_host, sandbox
):
    source = tmp_path / "source"
    source.mkdir()
    _seed(source)
    real = tmp_path / "real"
    real.mkdir()
    _seed(real)
    snap = snapshots.take(str(source), store=store)
    fork = snapshots.fork_one(snap, store=store).folder
    host = make_host(allow_all=True, config=Config(sandbox=sandbox))
    # The control: the same writes to a file of the snapshot's at the same depth, but not
    # in .git, change it (the command can reach the snapshot's files through its fork).
    script = "; ".join(
        f"echo evil > {folder}/hooks/pre-commit; echo evil > {folder}/hooks/post-checkout; "
        f"chmod 777 {folder}/hooks/pre-commit"
        for folder in (".git", "notgit")
    )
    seen = {}
    for where in (str(real), fork):
        result = host.run(ExecRequest(["sh", "-c", script], where, workspace=where))
        assert Path(where, "notgit", "hooks", "pre-commit").read_text() == "evil\n"
        assert Path(where, "notgit", "hooks", "post-checkout").read_text() == "evil\n"
        hooks = Path(where, ".git", "hooks")
        assert (hooks / "pre-commit").read_text() == HOOK  # the canary
        assert os.stat(hooks / "pre-commit").st_mode & 0o777 != 0o777
        assert not (hooks / "post-checkout").exists()
        said = result.stderr.text.count(".git/hooks/")
        seen[where] = (said, sorted(os.path.relpath(p, where) for p in result.quarantined))
    assert seen[fork] == seen[str(real)]  # as in a real folder
    assert Path(snap.folder, ".git", "hooks", "pre-commit").read_text() == HOOK
    snapshots.discard(snap, store=store)


@ROOT_ONLY
def test_discard_unmounts_even_a_busy_fork(tmp_path, store):
    _seed(tmp_path)
    snap = snapshots.take(str(tmp_path), store=store)
    idle, busy = snapshots.fork(snap, 2, store=store)
    snapshots.discard_fork(idle, store=store)
    assert not os.path.exists(idle) and not mounts.is_overlay(idle)
    assert not os.path.exists(Path(store, mounts.LAYERS, snap.id, os.path.basename(idle)))
    holder = subprocess.Popen(["sleep", "60"], cwd=busy)
    try:
        snapshots.discard_fork(busy, store=store)  # detached lazily
        assert not os.path.exists(busy)
        assert not mounts.overlays_beneath(store)
    finally:
        holder.kill()
        holder.wait()
    assert _tree(snap.folder) == _tree(str(tmp_path))
    snapshots.discard(snap, store=store)


KILLED = """
import os, signal, sys
from stockade.layers import Rules, journal, mounts, place, snapshots
mounts.unmount = lambda point: os.kill(os.getpid(), signal.SIGKILL)
snapshots.discard_fork(sys.argv[1], store=sys.argv[2])
"""


@ROOT_ONLY
def test_a_mount_left_by_a_killed_discard_is_swept(tmp_path, store):
    _seed(tmp_path)
    snap = snapshots.take(str(tmp_path), store=store)
    left, whole = snapshots.fork(snap, 2, store=store)
    done = subprocess.run([sys.executable, "-c", KILLED, left, store], check=False)
    assert done.returncode == -signal.SIGKILL
    assert mounts.is_overlay(left)  # killed between marking it gone and unmounting it
    assert snapshots.sweep(store) == [os.path.realpath(left)]
    assert not os.path.exists(left) and not mounts.is_overlay(left)
    assert os.listdir(Path(store, mounts.LAYERS, snap.id)) == [os.path.basename(whole)]
    assert mounts.is_overlay(whole)  # a whole fork is a workspace in use: it stays
    assert snapshots.forks(snap, store=store) == (whole,)
    snapshots.discard(snap, store=store)
    assert not mounts.overlays_beneath(store)


@ROOT_ONLY
def test_a_fork_whose_mount_is_gone_is_mounted_again_before_its_command(tmp_path, store, make_host):
    _seed(tmp_path)
    snap = snapshots.take(str(tmp_path), store=store)
    fork = snapshots.fork_one(snap, store=store).folder
    host = make_host(allow_all=True, config=Config(sandbox="bubblewrap"))
    host.run(ExecRequest(["sh", "-c", "echo kept > kept.txt"], fork, workspace=fork))
    mounts.unmount(fork)  # as a reboot leaves it
    assert os.listdir(fork) == []
    result = host.run(ExecRequest(["cat", "kept.txt", "a.txt"], fork, workspace=fork))
    assert result.stdout.text == "kept\na.txt\n"
    assert mounts.is_overlay(fork)
    snapshots.discard(snap, store=store)


@ROOT_ONLY
def test_a_store_on_an_overlay_takes_links_and_says_why(tmp_path):
    parts = [tmp_path / n for n in ("lower", "upper", "work", "merged")]
    for part in parts:
        part.mkdir()
    mounts.mount(*(str(p) for p in parts))
    try:
        store = str(parts[3] / "store")
        os.makedirs(store)
        source = parts[3] / "source"
        source.mkdir()
        _seed(source)
        snap = snapshots.take(str(source), store=store)
        made = snapshots.fork_one(snap, store=store)
        assert made.method == "links"
        assert "lies on an overlay" in made.why
        assert not mounts.is_overlay(made.folder)
        snapshots.discard(snap, store=store)
    finally:
        mounts.unmount(str(parts[3]))


@pytest.mark.skipif(os.geteuid() == 0, reason="the unprivileged fallback")
def test_unprivileged_forks_are_links_and_say_why(tmp_path, store):
    _seed(tmp_path)
    snap = snapshots.take(str(tmp_path), store=store)
    made = snapshots.fork_one(snap, store=store)
    assert made.method == "links"
    assert "CAP_SYS_ADMIN" in made.why
    assert os.stat(Path(made.folder, "a.txt")).st_ino == os.stat(Path(snap.folder, "a.txt")).st_ino
    snapshots.discard(snap, store=store)


def test_doctor_says_how_forks_are_made_here(tmp_path):
    done = stockade("doctor", "--json", cwd=tmp_path)
    (fact,) = [f for f in json.loads(done.stdout)["kernel"] if f["name"] == "forks"]
    if os.geteuid() == 0:
        assert fact["ok"] and "overlay" in fact["detail"], fact
    else:
        assert not fact["ok"] and "CAP_SYS_ADMIN" in fact["detail"]


@ROOT_ONLY
def test_a_commit_left_for_a_fork_a_reboot_unmounted_lands_in_the_fork(tmp_path, store):
    _seed(tmp_path)
    snap = snapshots.take(str(tmp_path), store=store)
    fork = snapshots.fork_one(snap, store=store).folder
    made = place.make((fork,), store, "left")
    assert made is not None and made[0].hide == os.path.join(store, place.LAYERS)
    Path(made[0].upper, "landed.txt").write_text("x")
    left = journal.Entry(
        "left",
        state="landing",
        layers=made,
        rules=Rules(os.path.join(store, "q")),
        pid=2**22 + 1,
        started=1,
    )
    journal.write(store, left)  # a host that died before it landed anything
    mounts.unmount(fork)  # and the machine rebooted
    assert [r.outcome for r in journal.recover(store)] == ["finished"]
    assert mounts.is_overlay(fork)
    assert Path(fork, "landed.txt").read_text() == "x"
    assert Path(fork, "a.txt").read_text() == "a.txt\n"  # the fork's, not a bare folder
    assert not Path(snap.folder, "landed.txt").exists()
    mounts.unmount(fork)
    assert os.listdir(fork) == []  # nothing went into the bare mount point
    snapshots.discard(snap, store=store)


def test_a_gone_fork_is_made_again_at_its_path(tmp_path, store):
    _seed(tmp_path)
    snap = snapshots.take(str(tmp_path), store=store)
    first = snapshots.fork_one(snap, store=store)
    Path(first.folder, "mine.txt").write_text("mine")
    with pytest.raises(UsageError):  # it is there still
        snapshots.fork_one(snap, store=store, at=first.folder)
    with pytest.raises(UsageError):  # not a fork's path
        snapshots.fork_one(snap, store=store, at=str(tmp_path / "elsewhere"))
    snapshots.discard_fork(first.folder, store=store)
    again = snapshots.fork_one(snap, store=store, at=first.folder)
    assert (again.folder, again.method) == (first.folder, first.method)
    assert not Path(again.folder, "mine.txt").exists()  # the snapshot's, afresh
    assert _tree(again.folder) == _tree(snap.folder)
    snapshots.discard(snap, store=store)
    assert not mounts.overlays_beneath(store)
