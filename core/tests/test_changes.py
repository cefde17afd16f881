"""The change tracker on a real file system: inotify, the scan fallback, and an oracle."""

import errno
import mmap
import os
import shutil
import tempfile
import time

import inotify_simple
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stockade.conformance.procs import open_fds
from stockade.request.result import Changes
from stockade.run.changes import TooLarge, Watch, watch


def tree(root, spec):
    """Plant files (``"a/b"``: text) and directories (``"a/"``) under ``root``."""
    for path, text in spec.items():
        full = os.path.join(root, path)
        if path.endswith("/"):
            os.makedirs(full, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(text)
    return root


def past(root):
    """Push every mtime back an hour: nothing planted looks written during the run."""
    for where, dirs, files in os.walk(root):
        for name in dirs + files:
            os.utime(os.path.join(where, name), (time.time() - 3600,) * 2, follow_symlinks=False)


def lists(changes):
    return changes.created, changes.modified, changes.deleted


def rel(root, *parts):
    return os.path.join(root, *parts)


@pytest.fixture
def ws(tmp_path):
    root = str(tmp_path / "ws")
    tree(root, {"a/f": "1", "a/b/g": "2", "keep": "3", "c/": "", "d/x": "4", "d/y/z": "5"})
    past(root)
    return root


def test_unchanged_tree_reports_nothing(ws):
    changes = watch(ws).finish()
    assert changes == Changes(total=0, method="inotify")


def test_root_named_through_a_symlink(ws, tmp_path):
    os.symlink(ws, tmp_path / "link")
    w = watch(str(tmp_path / "link"))
    tree(ws, {"c/new": "n"})
    changes = w.finish()
    assert (changes.method, changes.created) == ("inotify", ("c/new",))


def test_create_modify_delete_files(ws):
    w = watch(ws)
    tree(ws, {"new": "n", "c/inner": "i"})
    with open(rel(ws, "keep"), "a") as f:
        f.write("more")
    os.unlink(rel(ws, "a/f"))
    changes = w.finish()
    assert lists(changes) == (("c/inner", "new"), ("keep",), ("a/f",))
    assert changes.total == 4
    assert not changes.truncated


def test_nested_new_dirs_list_everything_in_them(ws):
    w = watch(ws)
    tree(ws, {"n/m/o/p": "deep", "n/q": "q", "n/e/": "", "a/b/h/i": "i"})
    changes = w.finish()
    assert changes.created == (
        "a/b/h/",
        "a/b/h/i",
        "n/",
        "n/e/",
        "n/m/",
        "n/m/o/",
        "n/m/o/p",
        "n/q",
    )
    assert changes.modified == changes.deleted == ()


def test_deleted_dir_lists_what_it_held(ws):
    w = watch(ws)
    shutil.rmtree(rel(ws, "d"))
    changes = w.finish()
    assert lists(changes) == ((), (), ("d/", "d/x", "d/y/", "d/y/z"))


def test_renames_within_and_across_dirs(ws):
    w = watch(ws)
    os.rename(rel(ws, "keep"), rel(ws, "kept"))
    os.rename(rel(ws, "a/f"), rel(ws, "c/f"))
    os.rename(rel(ws, "d"), rel(ws, "a/b/d2"))
    changes = w.finish()
    assert changes.created == ("a/b/d2/", "a/b/d2/x", "a/b/d2/y/", "a/b/d2/y/z", "c/f", "kept")
    assert changes.deleted == ("a/f", "d/", "d/x", "d/y/", "d/y/z", "keep")
    assert changes.modified == ()


def test_atomic_replace_is_modified(ws):
    w = watch(ws)
    tree(ws, {"a/.f.tmp": "new content"})
    os.rename(rel(ws, "a/.f.tmp"), rel(ws, "a/f"))
    assert lists(w.finish()) == ((), ("a/f",), ())


def test_moved_away_and_back_is_modified(ws):
    w = watch(ws)
    os.rename(rel(ws, "keep"), rel(ws, "c/keep"))
    os.rename(rel(ws, "c/keep"), rel(ws, "keep"))
    assert lists(w.finish()) == ((), ("keep",), ())


def test_dir_moved_away_and_back_is_modified_alone(ws):
    w = watch(ws)
    os.rename(rel(ws, "d"), rel(ws, "c/d"))
    with open(rel(ws, "c/d/x"), "a") as f:
        f.write("+")
    os.rename(rel(ws, "c/d"), rel(ws, "d"))
    assert lists(w.finish()) == ((), ("d/", "d/x"), ())


def test_chmod_is_modified(ws):
    w = watch(ws)
    os.chmod(rel(ws, "keep"), 0o600)
    os.chmod(rel(ws, "d/y"), 0o700)
    assert lists(w.finish()) == ((), ("d/y/", "keep"), ())


def test_mmap_write_is_modified(ws):
    w = watch(ws)
    with open(rel(ws, "keep"), "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        m[0:1] = b"X"
    assert lists(w.finish()) == ((), ("keep",), ())


def test_same_bytes_written_again_is_modified(ws):
    w = watch(ws)
    with open(rel(ws, "a/f"), "w") as f:
        f.write("1")
    assert lists(w.finish()) == ((), ("a/f",), ())


def test_opened_for_writing_but_untouched_is_not_listed(ws):
    w = watch(ws)
    with open(rel(ws, "a/f"), "r+"):
        pass
    assert lists(w.finish()) == ((), (), ())


def test_symlinks_are_entries_never_followed(ws):
    w = watch(ws)
    os.symlink("/", rel(ws, "to-root"))
    os.symlink("d", rel(ws, "a/to-d"))
    changes = w.finish()
    assert lists(changes) == (("a/to-d", "to-root"), (), ())
    assert changes.total == 2


def test_dir_swapped_for_a_symlink_outside(ws, tmp_path):
    outside = tree(str(tmp_path / "outside"), {"secret": "s", "sub/more": "m"})
    w = watch(ws)
    shutil.rmtree(rel(ws, "d"))
    os.symlink(outside, rel(ws, "d"))
    os.rename(rel(ws, "a/b"), rel(ws, "moved"))
    os.symlink(outside, rel(ws, "a/b"))
    changes = w.finish()
    assert changes.created == ("a/b", "d", "moved/", "moved/g")
    assert changes.deleted == ("a/b/", "a/b/g", "d/", "d/x", "d/y/", "d/y/z")
    assert changes.modified == ()
    listed = " ".join(changes.created + changes.deleted)
    assert "secret" not in listed
    assert "more" not in listed


def test_dir_replaced_by_another_dir(ws):
    w = watch(ws)
    shutil.rmtree(rel(ws, "d"))
    tree(ws, {"d/x": "again", "d/new": "n"})
    changes = w.finish()
    assert lists(changes) == (("d/new",), ("d/", "d/x"), ("d/y/", "d/y/z"))


def test_cap_keeps_the_exact_total(ws):
    w = watch(ws, limit=7)
    tree(ws, {f"n{i}": "" for i in range(5)})
    for name in ("a/f", "a/b/g", "d/x", "d/y/z", "keep"):
        with open(rel(ws, name), "a") as f:
            f.write("+")
    shutil.rmtree(rel(ws, "c"))
    changes = w.finish()
    assert changes.created == ("n0", "n1", "n2", "n3", "n4")
    assert changes.modified == ("a/b/g", "a/f")
    assert changes.deleted == ()
    assert changes.total == 11
    assert changes.truncated


def test_too_large_raises_and_releases(tmp_path):
    root = tree(str(tmp_path), {f"f{i}": "" for i in range(20)})
    before = open_fds()
    with pytest.raises(TooLarge):
        Watch(root, max_entries=10)
    # The inotify instance is closed by a thread of its own. Other tests' threads in this
    # process may close descriptors meanwhile, so compare what is open, not how many.
    deadline = time.monotonic() + 2
    while open_fds() - before and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not open_fds() - before
    assert watch(root, max_entries=20).finish().total == 0


def test_finish_once_close_idempotent(ws):
    w = watch(ws)
    w.finish()
    with pytest.raises(RuntimeError):
        w.finish()
    w.close()
    with watch(ws) as w2:
        pass
    w2.close()
    with pytest.raises(RuntimeError):
        w2.finish()


def test_root_deleted(ws):
    w = watch(ws)
    shutil.rmtree(ws)
    changes = w.finish()
    assert changes.deleted == (
        "a/", "a/b/", "a/b/g", "a/f", "c/", "d/", "d/x", "d/y/", "d/y/z", "keep",
    )  # fmt: skip
    assert changes.created == changes.modified == ()


def test_root_replaced(ws):
    w = watch(ws)
    os.rename(ws, ws + ".old")
    tree(ws, {"keep": "other"})
    changes = w.finish()
    assert changes.created == ("keep",)
    assert len(changes.deleted) == 10
    assert "keep" in changes.deleted


def scenario(root):
    """The same few changes, for comparing methods."""
    tree(root, {"new": "n", "d/y/w/v": "v"})
    with open(rel(root, "keep"), "a") as f:
        f.write("+")
    os.chmod(rel(root, "a/f"), 0o600)
    os.rename(rel(root, "a/b"), rel(root, "c/b"))
    os.unlink(rel(root, "d/x"))


def test_scan_fallback_gives_the_same_answer(ws, tmp_path, monkeypatch):
    twin = str(tmp_path / "twin")
    shutil.copytree(ws, twin, symlinks=True)
    time.sleep(0.01)  # past one tick of the coarse clock: setup ctimes fall before the run
    w = watch(ws)
    scenario(ws)
    by_inotify = w.finish()

    def no_inotify(*_args, **_kwargs):
        raise OSError(errno.EMFILE, "too many instances")

    monkeypatch.setattr(inotify_simple, "INotify", no_inotify)
    w = watch(twin)
    scenario(twin)
    by_scan = w.finish()
    assert by_inotify.method == "inotify"
    assert by_scan.method == "scan"
    assert lists(by_scan) == lists(by_inotify)
    assert by_scan.modified == ("a/f", "keep")


def test_out_of_watches_falls_back_to_scan(ws, monkeypatch):
    class Starved(inotify_simple.INotify):
        def add_watch(self, path, mask):
            raise OSError(errno.ENOSPC, "no watches left")

    monkeypatch.setattr(inotify_simple, "INotify", Starved)
    w = watch(ws)
    tree(ws, {"c/new": "n"})
    changes = w.finish()
    assert (changes.method, changes.created) == ("scan", ("c/new",))


def test_queue_overflow_falls_back_to_scan(tmp_path, monkeypatch):
    with open("/proc/sys/fs/inotify/max_queued_events") as f:
        queued = int(f.read())
    if queued > 100_000:
        pytest.skip(f"max_queued_events is {queued}: too many files to overflow cheaply")
    monkeypatch.setattr(Watch, "_spawn_drain", lambda self: None)  # nobody drains the queue
    root = tree(str(tmp_path / "ws"), {"old": "o"})
    w = watch(root)
    count = queued // 2 + 50  # each new file queues at least CREATE and CLOSE_WRITE
    for i in range(count):
        os.close(os.open(f"{root}/f{i:05}", os.O_CREAT | os.O_WRONLY, 0o644))
    os.unlink(f"{root}/old")
    changes = w.finish()
    assert changes.method == "scan"
    assert changes.total == count + 1
    assert changes.truncated
    assert changes.created == tuple(f"f{i:05}" for i in range(1000))


# --- the oracle ------------------------------------------------------------------------------

NAMES = ("a", "b", "c")
KINDS = ("file", "mkdir", "write", "rewrite", "chmod", "delete", "rename")


class Model:
    """What the tree holds, by path, and which nodes the operations touched."""

    def __init__(self, root):
        self.root = root
        self.nodes = {}  # "x/y" -> (node id, is a directory)
        self.next = 0
        self.touched = set()

    def snapshot(self):
        return {path + "/" * is_dir: node for path, (node, is_dir) in self.nodes.items()}

    def pick(self, index, *, dirs=None, root=False):
        paths = sorted(p for p, (_n, d) in self.nodes.items() if dirs is None or d == dirs)
        paths = ["", *paths] if root else paths
        return paths[index % len(paths)] if paths else None

    def full(self, path):
        return os.path.join(self.root, path)

    def new(self, path, is_dir):
        self.next += 1
        self.nodes[path] = (self.next, is_dir)

    def apply(self, kind, i, j, k):
        target = self.pick(i, dirs=True, root=True)
        path = (target + "/" if target else "") + NAMES[k % len(NAMES)]
        if kind in ("file", "mkdir"):
            if path in self.nodes:
                return
            if kind == "mkdir":
                os.mkdir(self.full(path))
            else:
                with open(self.full(path), "w") as f:
                    f.write(path)
            self.new(path, kind == "mkdir")
            return
        chosen = self.pick(i, dirs=False if kind in ("write", "rewrite") else None)
        if chosen is None:
            return
        if kind == "rename":
            self.rename(chosen, self.pick(j, dirs=True, root=True), NAMES[k % len(NAMES)])
            return
        node, is_dir = self.nodes[chosen]
        if kind == "delete":
            (shutil.rmtree if is_dir else os.unlink)(self.full(chosen))
            self.drop(chosen)
            return
        if kind == "chmod":
            os.chmod(self.full(chosen), 0o700 if is_dir else 0o600)
        elif kind == "write":
            with open(self.full(chosen), "a") as f:
                f.write("+")
        else:
            with open(self.full(chosen), "rb") as f:
                data = f.read()
            with open(self.full(chosen), "wb") as f:
                f.write(data)
        self.touched.add(node)

    def drop(self, path):
        for p in [p for p in self.nodes if p == path or p.startswith(path + "/")]:
            del self.nodes[p]

    def rename(self, src, parent, name):
        dst = (parent + "/" if parent else "") + name
        if dst == src or dst.startswith(src + "/"):
            return
        node, is_dir = self.nodes[src]
        if dst in self.nodes:
            over_dir = self.nodes[dst][1]
            empty = not any(p.startswith(dst + "/") for p in self.nodes)
            if over_dir != is_dir or (over_dir and not empty):
                return
        os.rename(self.full(src), self.full(dst))
        self.drop(dst)
        for p in [p for p in self.nodes if p == src or p.startswith(src + "/")]:
            self.nodes[dst + p[len(src) :]] = self.nodes.pop(p)
        self.touched.add(node)


ops = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, 20), st.integers(0, 20), st.integers(0, 2)),
    max_size=12,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=ops, run=ops)
def test_matches_the_oracle(setup, run):
    with tempfile.TemporaryDirectory() as root:
        model = Model(root)
        for op in setup:
            model.apply(*op)
        before = model.snapshot()
        model.touched.clear()
        w = watch(root)
        for op in run:
            model.apply(*op)
        after = model.snapshot()
        changes = w.finish()
    created = sorted(after.keys() - before.keys())
    deleted = sorted(before.keys() - after.keys())
    modified = sorted(
        p
        for p in before.keys() & after.keys()
        if before[p] != after[p] or after[p] in model.touched
    )
    assert lists(changes) == (tuple(created), tuple(modified), tuple(deleted))
    assert changes.total == len(created) + len(modified) + len(deleted)
    assert changes.method == "inotify"
