"""Landing a layer (:mod:`stockade.layers`) gives what the same actions give run directly
(a folder keeps its owner's rights, as the check after a direct run gives them back).

Random trees and random actions (create, delete, rename, chmod, symlink, a folder replaced by
a file and back) run once directly in one copy of a tree and once in an overlay over another
copy (the real kernel overlay, through bwrap, as the bubblewrap provider mounts it); the
layer is then landed. Both trees must be the same, less protected names, which never land.
Then: a folder swapped for a symlink while a commit runs never lets it write outside, and a
host killed mid-commit leaves a journal the next start finishes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stockade_bubblewrap import discover
from stockade_bubblewrap.layout import overlay_args

from stockade.config.schema import Config, store_folder
from stockade.confine.protected import enclosing
from stockade.layers import Rules, Tally, journal, land, place
from stockade.layers.place import Layer
from stockade.request.spec import ExecRequest
from stockade.testing import EventLog

NAMES = ("a", "b", "c", ".vscode")
# Applies each action, ignoring the ones that fail (the same ones fail both ways).
APPLY = r"""
import json, os, shutil, sys
def remove(p):
    if os.path.isdir(p) and not os.path.islink(p): shutil.rmtree(p)
    else: os.unlink(p)
for op, path, arg in json.loads(sys.argv[1]):
    try:
        if op == "write":
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            open(path, "w").write(arg)
        elif op == "delete": remove(path)
        elif op == "rename":
            if not os.path.lexists(arg): shutil.move(path, arg)
        elif op == "chmod": os.chmod(path, int(arg), follow_symlinks=False)
        elif op == "symlink": os.symlink(arg, path)
        elif op == "to_dir":
            remove(path); os.mkdir(path); open(os.path.join(path, "in"), "w").write("x")
        elif op == "to_file": remove(path); open(path, "w").write("was a folder")
    except (OSError, NotImplementedError):
        pass
"""

paths = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)
actions = st.lists(
    st.one_of(
        st.tuples(st.just("write"), paths, st.text("xyz", max_size=5)),
        st.tuples(st.just("delete"), paths, st.just("")),
        st.tuples(st.just("rename"), paths, paths),
        st.tuples(st.just("chmod"), paths, st.sampled_from(["448", "420", "493"])),
        st.tuples(st.just("symlink"), paths, st.sampled_from(["a", "../x", "/etc/passwd"])),
        st.tuples(st.just("to_dir"), paths, st.just("")),
        st.tuples(st.just("to_file"), paths, st.just("")),
    ),
    max_size=8,
)
trees = st.dictionaries(
    st.lists(st.sampled_from(NAMES[:3]), min_size=1, max_size=3).map("/".join),
    st.text("pq", max_size=3),
    max_size=6,
)


def _bwrap() -> str:
    return discover.select().path


def _plant(root: Path, tree: dict[str, str]) -> None:
    for rel, content in tree.items():
        path = root / rel
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
        except OSError:
            pass  # a name that is a file and a folder: the first one wins


def _snapshot(root: Path) -> dict[str, object]:
    """Every entry (less protected ones): kind, mode, content or link target."""
    seen: dict[str, object] = {}
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if enclosing("/" + rel) is not None:
                continue
            try:
                info = os.lstat(path)
            except PermissionError:  # in a folder the actions took the search right from
                seen[rel] = ("unreachable",)
                continue
            if stat.S_ISLNK(info.st_mode):
                seen[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                seen[rel] = ("dir", stat.S_IMODE(info.st_mode) | 0o700)  # kept for the owner
            else:
                try:
                    content = Path(path).read_bytes()
                except PermissionError:
                    content = b"(unreadable)"
                seen[rel] = ("file", stat.S_IMODE(info.st_mode), content)
    return seen


def _owner_keeps_folders(root: Path) -> None:
    """Give the owner back every folder's rights, as landing keeps them (the snapshot reads
    a folder's mode with them): a folder the actions took the search right from leaves
    what is in it reachable in the landed tree, and must here too (seen as the
    unprivileged user; root searches any folder)."""
    os.chmod(root, stat.S_IMODE(os.lstat(root).st_mode) | 0o700)
    for folder, dirs, _files in os.walk(root):
        for name in dirs:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            if stat.S_ISDIR(info.st_mode):
                os.chmod(path, stat.S_IMODE(info.st_mode) | 0o700)


def _layered(root: Path, layer: Layer, script: list[str]) -> None:
    _confined(root, overlay_args(str(root), layer.upper, layer.work), script)


def _direct(root: Path, script: list[str]) -> None:
    """The actions run straight in ``root``, the rest of the machine read-only as for the
    layered run: a symlink the actions made to ``/etc/passwd`` and a write through it would
    otherwise write the host's, run as root (it did once: the file held ``yyz``)."""
    _confined(root, ["--bind", str(root), str(root)], script)


def _confined(root: Path, mount: list[str], script: list[str]) -> None:
    argv = [
        _bwrap(),
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        *mount,
        "--chdir",
        str(root),
        "--",
        *script,
    ]
    subprocess.run(argv, check=True, capture_output=True)


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(tree=trees, steps=actions)
def test_a_landed_layer_equals_the_same_actions_run_directly(tree, steps):
    base = Path(tempfile.mkdtemp(dir=Path.home()))
    try:
        direct, layered = base / "direct", base / "layered"
        for root in (direct, layered):
            root.mkdir()
            _plant(root, tree)
        script = [sys.executable, "-S", "-c", APPLY, json.dumps(steps)]
        _direct(direct, script)
        _owner_keeps_folders(direct)
        layer = Layer(str(layered), str(base / "layer"), str(base))
        os.makedirs(layer.upper)
        os.makedirs(layer.work)
        _layered(layered, layer, script)
        tally = Tally()
        land(layer, Rules(str(base / "quarantine")), tally)
        assert not tally.failed
        assert _snapshot(layered) == _snapshot(direct)
        # A protected name the actions made is in the quarantine, never in the root.
        for folder, dirs, files in os.walk(layered):
            for name in (*dirs, *files):
                assert name != ".vscode", os.path.join(folder, name)
    finally:
        place.remove_tree(str(base))


def test_the_direct_run_cannot_write_through_a_link_outside_its_tree(tmp_path):
    root, canary = tmp_path / "root", tmp_path / "canary"
    root.mkdir()
    canary.write_text("kept")
    steps = [
        ["symlink", "out", str(canary)], ["write", "out", "yyz"],  # outside: refused
        ["symlink", "in", "mine"], ["write", "in", "yyz"],  # control: inside, written
    ]  # fmt: skip
    _direct(root, [sys.executable, "-S", "-c", APPLY, json.dumps(steps)])
    assert canary.read_text() == "kept"
    assert (root / "mine").read_text() == "yyz"


def test_a_folder_swapped_for_a_link_during_the_commit_never_writes_outside(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    for attempt in range(8):
        layer = Layer(str(root), str(tmp_path / f"layer{attempt}"), str(tmp_path))
        upper = Path(layer.upper)
        (upper / "sub").mkdir(parents=True)
        for n in range(100):
            (upper / "sub" / f"f{n}").write_text("planted")
        stop = threading.Event()

        def swap(stop: threading.Event = stop) -> None:
            while not stop.is_set():
                moved = root / "moved"
                try:
                    os.rename(root / "sub", moved)
                    os.symlink(outside, root / "sub")
                    time.sleep(0.0005)
                    os.unlink(root / "sub")
                    os.rename(moved, root / "sub")
                except OSError:
                    pass

        racer = threading.Thread(target=swap)
        racer.start()
        try:
            land(layer, Rules(str(tmp_path / "q")), Tally())
        finally:
            stop.set()
            racer.join()
        assert list(outside.iterdir()) == [], f"written outside on attempt {attempt}"
        shutil.rmtree(layer.folder)


CHILD = r"""
import os, sys
from stockade.layers import journal, Rules, Tally, land
from stockade.layers.place import Layer
store, root, folder = sys.argv[1:4]
layer = Layer(root, folder, store)
entry = journal.Entry("killed", state=sys.argv[4], layers=(layer,), rules=Rules(store + "/q"),
                      pid=os.getpid(), started=journal.start_time(os.getpid()))
journal.write(store, entry)
print("ready", flush=True)
land(layer, entry.rules, Tally())
"""


@pytest.mark.parametrize("state", ["landing", "running"])
def test_a_host_killed_mid_commit_is_finished_or_discarded_on_the_next_start(tmp_path, state):
    store, root = tmp_path / "store", tmp_path / "root"
    root.mkdir()
    (root / "old").write_text("old")
    layer = Layer(str(root), str(tmp_path / "layer"), str(store))
    upper = Path(layer.upper)
    for n in range(1000):
        folder = upper / f"d{n % 30}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{n}").write_text(str(n))
    argv = [sys.executable, "-c", CHILD, str(store), str(root), layer.folder, state]
    with subprocess.Popen(argv, stdout=subprocess.PIPE) as child:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
        child.wait()
    landed = sum(len(files) for _, _, files in os.walk(root)) - 1
    done = journal.recover(str(store))
    assert [r.outcome for r in done] == ["finished" if state == "landing" else "discarded"]
    assert not os.path.exists(layer.folder)
    assert os.listdir(journal.folder(str(store))) == []
    after = sum(len(files) for _, _, files in os.walk(root)) - 1
    if state == "landing":  # every file landed exactly once, whatever the kill interrupted
        assert after == 1000 and len(done[0].changed) + landed >= 1000
    else:
        assert after == landed  # nothing more lands; what the killed host landed stays
    assert (root / "old").read_text() == "old"


def test_a_stray_layer_folder_no_journal_names_is_swept_once_old(tmp_path):
    layers = tmp_path / "store" / "layers"
    old, fresh = layers / "deadbeef.0", layers / "cafe.0"
    for folder in (old, fresh):
        (folder / "upper").mkdir(parents=True)
    stale = time.time() - journal.STRAY_AGE - 60
    os.utime(old, (stale, stale))
    assert journal.recover(str(tmp_path / "store")) == []
    assert not old.exists() and fresh.exists()


def test_a_starting_host_finishes_a_left_commit_and_records_it(tmp_path, make_host):
    store = store_folder(Config())
    root = tmp_path / "root"
    root.mkdir()
    made = place.make((str(root),), store, "left")
    assert made is not None
    (Path(made[0].upper) / "landed.txt").write_text("x")
    rules = Rules(os.path.join(store, "quarantine", "left"))
    left = journal.Entry(
        "left", state="landing", layers=made, rules=rules, pid=2**22 + 1, started=1
    )
    journal.write(store, left)  # a host that died before it landed anything
    log = EventLog()
    host = make_host(allow_all=True, config=Config(sandbox="bubblewrap"), plugins=[log])
    assert host.run(ExecRequest(["true"], str(tmp_path))).ok
    layer_events = [e for e in log.events if e.kind == "layer"]
    assert [(e.action_id, e.outcome) for e in layer_events] == [("left", "finished")]
    assert (root / "landed.txt").read_text() == "x"
    assert not os.path.exists(made[0].folder)
