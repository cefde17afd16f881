"""The file tools never leave the workspace, whatever the path: generated paths, symlinks
planted inside, bad names, magic links, a hard link to a file outside, and a directory
swapped for a symlink out while writes go into it.

Every test runs against both resolvers (the ``resolver`` fixture): ``openat2`` (skipped where
the kernel lacks it) and the component-by-component walk."""

from __future__ import annotations

import ctypes
import hashlib
import os
import secrets
import threading

import pytest
from files_helpers import _outcome
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from stockade.errors import UsageError
from stockade.workspace.files import Workspace

# -- the tree: a workspace beside an outside directory, with links planted inside --------


class Tree:
    def __init__(self, base, resolver: str) -> None:
        self.base = str(base)
        self.ws = os.path.join(self.base, "ws")
        self.outside = os.path.join(self.base, "outside")
        self.canary = "CANARY-" + secrets.token_hex(16)
        self.canary_name = f"canary-{secrets.token_hex(4)}.txt"
        self.canary_sha = hashlib.sha256(self.canary.encode()).hexdigest()
        os.makedirs(os.path.join(self.outside, "secret"))
        for where in (self.outside, os.path.join(self.outside, "secret")):
            with open(os.path.join(where, self.canary_name), "w") as f:
                f.write(self.canary)
        os.makedirs(os.path.join(self.ws, "sub", "deep"))
        with open(os.path.join(self.ws, "sub", "inner.txt"), "w") as f:
            f.write("inner")
        canary = os.path.join(self.outside, self.canary_name)
        links = {
            "out_file": os.path.join("..", "outside", self.canary_name),
            "out_dir": os.path.join("..", "outside"),
            "abs_file": canary,
            "abs_dir": self.outside,
            "proc": "/proc/self/root",
            "proc_rel": "../" * 40 + "proc/self/root",
            "proc_cwd": "/proc/self/cwd",
            "in_dir": "sub",
            "in_file": "sub/inner.txt",
            "loop": "loop",
            "sub/up": "../..",
            "sub/deep/up2": "../../..",
            "sub/deep/back": "../../out_dir",
        }
        for name, target in links.items():
            os.symlink(target, os.path.join(self.ws, name))
        self.before = self.snapshot()
        self.workspace = Workspace(self.ws, resolver=resolver)
        assert self.workspace.resolver == resolver

    def snapshot(self) -> dict[str, str]:
        """Every name under the base but outside the workspace, with what it holds."""
        seen: dict[str, str] = {}
        for top, dirs, names in os.walk(self.base):
            if os.path.realpath(top).startswith(os.path.realpath(self.ws)):
                continue
            for name in dirs + names:
                full = os.path.join(top, name)
                rel = os.path.relpath(full, self.base)
                if rel == "ws" or rel.startswith("ws/"):
                    continue
                if os.path.islink(full):
                    seen[rel] = "link:" + os.readlink(full)
                elif os.path.isdir(full):
                    seen[rel] = "dir"
                else:
                    with open(full, "rb") as f:
                        seen[rel] = hashlib.sha256(f.read()).hexdigest()
        return seen

    def assert_untouched(self) -> None:
        assert self.snapshot() == self.before

    def assert_no_canary(self, value: object) -> None:
        text = repr(value)
        assert self.canary not in text
        assert self.canary_sha not in text
        assert self.canary_name not in text


@pytest.fixture
def tree(tmp_path, resolver):
    t = Tree(tmp_path, resolver)
    yield t
    t.workspace.close()


# -- hypothesis: generated paths never read or write outside ------------------------------

COMPONENTS = st.sampled_from(
    [
        "..",
        ".",
        "",
        "sub",
        "deep",
        "inner.txt",
        "new.txt",
        "x",
        "out_file",
        "out_dir",
        "abs_file",
        "abs_dir",
        "proc",
        "proc_rel",
        "proc_cwd",
        "in_dir",
        "in_file",
        "loop",
        "up",
        "up2",
        "back",
        "secret",
        "outside",
        "ws",
        "etc",
        "passwd",
        "root",
        "self",
        ".git",
        "a\x00b",
        "n" * 256,
        "é" * 128,
    ]
)
PATHS = st.builds(
    lambda prefix, parts: prefix + "/".join(parts),
    st.sampled_from(["", "", "", "/", "/proc/self/root/", "./", "../"]),
    st.lists(COMPONENTS, min_size=0, max_size=8),
)
FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@FUZZ
@given(path=PATHS)
@example(path="out_file")
@example(path="out_dir/" + "x")
@example(path="abs_dir")
@example(path="proc/etc/hostname")
@example(path="/proc/self/root/etc/hostname")
@example(path="sub/up/outside")
@example(path="sub/deep/back/secret")
@example(path="in_dir/../../outside")
def test_generated_paths_never_read_outside(tree, path):
    ws = tree.workspace
    for result in (
        _outcome(ws.file_read, path),
        _outcome(ws.file_bytes, path),
        _outcome(ws.file_list, path),
        _outcome(ws.file_read, path + "/" + tree.canary_name),
        _outcome(ws.file_read, path + "/secret/" + tree.canary_name),
        _outcome(ws.file_bytes, path + "/secret/" + tree.canary_name),
        _outcome(ws.file_list, path + "/secret"),
    ):
        tree.assert_no_canary(result)
    tree.assert_untouched()


@FUZZ
@given(path=PATHS, name=st.sampled_from(["", "/new.txt", "/secret/w.txt", "/x/y/z.txt"]))
@example(path="out_dir", name="/new.txt")
@example(path="out_file", name="")
@example(path="abs_dir/secret", name="/w.txt")
@example(path="sub/up/outside", name="/new.txt")
@example(path="in_dir", name="/new.txt")
@example(path="proc_rel/tmp", name="/new.txt")
def test_generated_paths_never_write_outside(tree, path, name):
    ws = tree.workspace
    _outcome(ws.file_write, path + name, "PWNED")
    _outcome(ws.file_write, path + name, b"PWNED\x00", make_parents=False)
    tree.assert_untouched()


def test_symlinks_pointing_out_fail(tree):
    ws = tree.workspace
    for path in (
        "out_file",
        "abs_file",
        "out_dir/" + tree.canary_name,
        "abs_dir/" + tree.canary_name,
        "proc/etc/hostname",
        "proc_rel/etc/hostname",
        "proc_cwd/" + tree.canary_name,
        "sub/up/outside/" + tree.canary_name,
        "sub/deep/back/" + tree.canary_name,
        "loop",
    ):
        with pytest.raises(UsageError):
            ws.file_read(path)
    for path in ("out_dir", "abs_dir", "proc", "sub/up", "sub/deep/up2"):
        with pytest.raises(UsageError):
            ws.file_list(path)


def test_in_tree_symlinks_are_followed_for_reads_only(tree):
    ws = tree.workspace
    assert ws.file_read("in_file").text == "inner"
    assert ws.file_read("in_dir/inner.txt").text == "inner"
    assert [e.name for e in ws.file_list("in_dir").entries] == ["deep", "inner.txt", "up"]
    with pytest.raises(UsageError, match="symlink"):
        ws.file_write("in_dir/new.txt", "x")
    # A write to a symlink's own name is refused, not written through or over it.
    with pytest.raises(UsageError, match="symlink"):
        ws.file_write("in_file", "x")
    assert os.readlink(os.path.join(tree.ws, "in_file")) == "sub/inner.txt"
    assert ws.file_read("sub/inner.txt").text == "inner"


@pytest.mark.parametrize(
    "path",
    ["", "/etc/passwd", "/proc/self/root/etc/passwd", "a\x00b", "n" * 256, "../x", "a/../../x"],
)
def test_bad_paths_are_refused_by_name(tree, path):
    with pytest.raises(UsageError) as caught:
        tree.workspace.file_read(path)
    if path:
        assert caught.value.details.get("path") == path
    with pytest.raises(UsageError):
        tree.workspace.file_write(path, "x")
    tree.assert_untouched()


def test_magic_links_are_refused(resolver):
    # Rooted at /proc/self, "root" and "cwd" are magic links: never followed.
    with Workspace("/proc/self", resolver=resolver) as ws:
        for path in ("root/etc/hostname", "cwd", "exe", "root"):
            with pytest.raises(UsageError):
                ws.file_read(path)
        with pytest.raises(UsageError):
            ws.file_list("root")


# -- the race: a directory swapped for a symlink out while writes go into it -------------


def _exchange():
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "renameat2"):
        pytest.skip("no renameat2 in libc")
    at_fdcwd, rename_exchange = -100, 2

    def swap(a: str, b: str) -> None:
        if libc.renameat2(at_fdcwd, a.encode(), at_fdcwd, b.encode(), rename_exchange) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    return swap


@pytest.mark.parametrize("make_parents", [True, False])
def test_race_swapping_a_directory_for_a_symlink_cannot_escape(tree, make_parents):
    swap = _exchange()
    ws = tree.workspace
    target = os.path.join(tree.ws, "d")
    decoy = os.path.join(tree.ws, "decoy")
    os.mkdir(target)
    os.makedirs(os.path.join(target, "sub"))
    os.symlink(tree.outside, decoy)
    tree.before = tree.snapshot()
    stop = threading.Event()
    swaps = 0

    def swapper() -> None:
        nonlocal swaps
        while not stop.is_set():
            swap(target, decoy)  # d <-> decoy: d is now the symlink out, then the dir again
            swaps += 1

    thread = threading.Thread(target=swapper)
    thread.start()
    written = refused = i = 0
    try:
        # At least 1500 writes, and on until the race has both swapped and let writes
        # through (a loaded machine may schedule the swapper unkindly): bounded, not timed.
        while i < 1500 or ((written == 0 or swaps <= 100) and i < 100_000):
            path = f"d/sub/f{i % 7}.txt" if i % 2 else f"d/f{i % 5}.txt"
            try:
                ws.file_write(path, f"write {i}", make_parents=make_parents)
                written += 1
            except UsageError:
                refused += 1
            i += 1
    finally:
        stop.set()
        thread.join()
    assert swaps > 100
    assert written > 0
    tree.assert_untouched()
    # Every write that succeeded landed in the directory, under one of its two names.
    found = [
        name
        for top, _, names in os.walk(tree.ws)
        for name in names
        if name.startswith("f") and name.endswith(".txt")
    ]
    assert found
    assert not any(name.startswith(".stockade-tmp-") for _, _, n in os.walk(tree.ws) for name in n)


@pytest.mark.parametrize("resolver", ["openat2", "walk"])
def test_a_hard_link_to_a_file_outside_is_not_read(tmp_path, resolver):
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    secret = outside / "secret"
    secret.write_text("CANARY-hardlink")
    os.link(secret, ws / "innocent.txt")
    (ws / "plain.txt").write_text("fine")
    with Workspace(str(ws), resolver=resolver) as workspace:
        with pytest.raises(UsageError, match="hard links") as caught:
            workspace.file_read("innocent.txt")
        assert "CANARY" not in str(caught.value.to_dict())
        assert workspace.file_read("plain.txt").text == "fine"  # the control
