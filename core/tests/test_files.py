"""The file tools: nothing outside the workspace is read or written, whatever the path.

Every test runs against both resolvers: ``openat2`` (skipped where the kernel lacks it) and
the component-by-component walk.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import secrets
import threading

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from stockade.errors import BadCwd, StockadeError, UsageError
from stockade.workspace import files
from stockade.workspace.file_types import READ_LIMIT, WRITE_LIMIT
from stockade.workspace.files import Workspace


def _has_openat2() -> bool:
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        return files.openat2_available(fd)
    finally:
        os.close(fd)


HAS_OPENAT2 = _has_openat2()
RESOLVERS = [
    pytest.param("openat2", marks=pytest.mark.skipif(not HAS_OPENAT2, reason="no openat2 here")),
    "walk",
]


@pytest.fixture(params=RESOLVERS)
def resolver(request):
    return request.param


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


def _outcome(call, *args, **kwargs):
    """The tool's result, or ``None`` when it refused with a typed error."""
    try:
        return call(*args, **kwargs)
    except StockadeError:
        return None


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


# -- functional ---------------------------------------------------------------------------


@pytest.fixture
def ws(tmp_path, resolver):
    root = tmp_path / "ws"
    root.mkdir()
    with Workspace(str(root), resolver=resolver) as workspace:
        yield workspace


def test_root_must_be_a_directory(tmp_path):
    with pytest.raises(BadCwd):
        Workspace(str(tmp_path / "missing"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadCwd):
        Workspace(str(tmp_path / "file"))
    with pytest.raises(UsageError):
        Workspace(str(tmp_path), resolver="nope")  # type: ignore[arg-type]


def test_auto_picks_openat2_where_the_kernel_has_it(tmp_path):
    with Workspace(str(tmp_path)) as ws:
        assert ws.resolver == ("openat2" if HAS_OPENAT2 else "walk")
    with Workspace(str(tmp_path), resolver="walk") as ws:
        assert ws.resolver == "walk"


def test_closed_workspace_refuses(tmp_path):
    ws = Workspace(str(tmp_path))
    ws.close()
    ws.close()
    with pytest.raises(UsageError, match="closed"):
        ws.file_list()


def test_write_read_list(ws):
    first = ws.file_write("a/b/c.txt", "héllo\n")
    assert first.created
    assert first.changed
    assert first.old_sha256 is None
    assert first.old_size is None
    assert first.new_size == len("héllo\n".encode())
    assert first.new_sha256 == hashlib.sha256("héllo\n".encode()).hexdigest()
    assert first.path == "a/b/c.txt"

    again = ws.file_write("a/b/c.txt", "héllo\n")
    assert not again.changed
    assert not again.created

    second = ws.file_write("./a//b/../b/c.txt", "bye")
    assert second.path == "a/b/c.txt"
    assert not second.created
    assert second.changed
    assert second.old_sha256 == first.new_sha256
    assert second.old_size == first.new_size

    read = ws.file_read("a/b/c.txt")
    assert (read.text, read.binary, read.size, read.returned, read.truncated) == (
        "bye",
        False,
        3,
        3,
        False,
    )
    ws.file_write("a/z.bin", b"\x00\x01")
    os.symlink("b", os.path.join(ws.root, "a", "link"))
    listing = ws.file_list("a")
    assert listing.path == "a"
    assert [(e.name, e.kind, e.size) for e in listing.entries] == [
        ("b", "dir", 0),
        ("link", "symlink", 1),
        ("z.bin", "file", 2),
    ]
    assert not listing.truncated
    assert [e.name for e in ws.file_list().entries] == ["a"]


def test_listing_limit_and_kinds(ws):
    for i in range(12):
        ws.file_write(f"f{i:02}", "")
    os.mkfifo(os.path.join(ws.root, "pipe"))
    listing = ws.file_list(".", limit=5)
    assert [e.name for e in listing.entries] == ["f00", "f01", "f02", "f03", "f04"]
    assert listing.truncated
    kinds = {e.name: e.kind for e in ws.file_list().entries}
    assert kinds["pipe"] == "other"
    with pytest.raises(UsageError):
        ws.file_list(limit=0)
    with pytest.raises(UsageError, match="not a regular file"):
        ws.file_read("pipe")  # never blocks on the FIFO
    with pytest.raises(UsageError):
        ws.file_list("f00")


def test_write_needs_parents_unless_made(ws):
    with pytest.raises(UsageError, match="does not exist"):
        ws.file_write("no/such/file", "x", make_parents=False)
    assert not os.path.exists(os.path.join(ws.root, "no"))
    ws.file_write("no/such/file", "x")
    assert os.path.isfile(os.path.join(ws.root, "no", "such", "file"))


def test_write_refuses_directories_and_the_root(ws):
    ws.file_write("d/f", "x")
    with pytest.raises(UsageError, match="directory"):
        ws.file_write("d", "x")
    with pytest.raises(UsageError):
        ws.file_write(".", "x")
    with pytest.raises(UsageError):
        ws.file_write("d/f/g", "x")  # a file where a parent should be


def test_binary_files_are_described(ws):
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 10
    ws.file_write("img.png", png)
    read = ws.file_read("img.png")
    assert read.binary
    assert read.text is None
    assert read.returned == 0
    assert read.size == len(png)
    assert read.description is not None
    assert hashlib.sha256(png).hexdigest() in read.description
    assert "PNG" in read.description
    assert f"{len(png)} bytes" in read.description
    ws.file_write("latin1.txt", "café".encode("latin-1"))
    assert ws.file_read("latin1.txt").binary
    ws.file_write("blob", b"\x00")
    assert "unknown" in (ws.file_read("blob").description or "")


def test_offset_and_limit(ws):
    text = "ab€cd" * 3  # € is three bytes
    ws.file_write("t.txt", text)
    data = text.encode()
    first = ws.file_read("t.txt", limit=4)  # cuts inside the first €
    assert first.text == "ab"
    assert first.returned == 2
    assert first.truncated
    rest = ws.file_read("t.txt", offset=first.returned)
    assert rest.text == text[2:]
    assert not rest.truncated
    assert rest.returned == len(data) - 2
    parts, offset = [], 0
    while True:
        part = ws.file_read("t.txt", offset=offset, limit=5)
        parts.append(part.text)
        offset += part.returned
        if not part.truncated:
            break
    assert "".join(parts) == text
    past = ws.file_read("t.txt", offset=1000)
    assert (past.text, past.returned, past.truncated) == ("", 0, False)
    with pytest.raises(UsageError):
        ws.file_read("t.txt", offset=-1)
    with pytest.raises(UsageError):
        ws.file_read("t.txt", limit=READ_LIMIT + 1)
    with pytest.raises(UsageError):
        ws.file_read("t.txt", limit=0)


def test_reads_are_capped_at_256_kib(ws):
    ws.file_write("big.txt", "x" * (READ_LIMIT + 10))
    read = ws.file_read("big.txt")
    assert read.returned == READ_LIMIT
    assert read.truncated
    assert len(read.text or "") == READ_LIMIT


def test_invalid_utf8_past_the_sniff_is_replaced(ws):
    ws.file_write("late.txt", b"a" * (files.SNIFF_BYTES + 5) + b"\xff")
    read = ws.file_read("late.txt", offset=files.SNIFF_BYTES)
    assert not read.binary
    assert read.text == "a" * 5 + "\ufffd"


def test_one_mib_cap(ws):
    ok = ws.file_write("max.bin", b"a" * WRITE_LIMIT)
    assert ok.new_size == WRITE_LIMIT
    with pytest.raises(UsageError, match="limit") as caught:
        ws.file_write("over.bin", b"a" * (WRITE_LIMIT + 1))
    assert caught.value.details["size"] == WRITE_LIMIT + 1
    assert not os.path.exists(os.path.join(ws.root, "over.bin"))


@pytest.mark.parametrize(
    "path",
    [
        ".git/hooks/pre-commit",
        ".git",
        "sub/.git/config",
        "a/../.git/config",
        ".GIT/config",
        ".vscode/settings.json",
        ".claude/settings.json",
        ".mcp.json",
        "x/.envrc",
        ".codex/config.toml",
    ],
)
def test_protected_paths_are_never_written(ws, path):
    os.makedirs(os.path.join(ws.root, ".git", "hooks"))
    with pytest.raises(UsageError, match="protected") as caught:
        ws.file_write(path, "#!/bin/sh\necho pwned\n")
    assert caught.value.details["rule"] == "protected"
    assert os.listdir(os.path.join(ws.root, ".git", "hooks")) == []
    assert sorted(os.listdir(ws.root)) == [".git"]


def test_protected_names_come_from_the_shared_list():
    from stockade.confine.protected import AGENT_CONFIG

    assert {n.lower() for n in AGENT_CONFIG} | {".git"} == files._PROTECTED


def test_git_can_still_be_read(ws):
    os.makedirs(os.path.join(ws.root, ".git"))
    with open(os.path.join(ws.root, ".git", "HEAD"), "w") as f:
        f.write("ref: refs/heads/main\n")
    assert ws.file_read(".git/HEAD").text == "ref: refs/heads/main\n"


def test_a_failed_write_leaves_the_old_file_whole(ws, monkeypatch):
    ws.file_write("keep.txt", "old content")
    os.chmod(os.path.join(ws.root, "keep.txt"), 0o640)

    def boom(fd):
        raise OSError(errno.EIO, "simulated I/O error")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(StockadeError, match="unchanged") as caught:
        ws.file_write("keep.txt", "new content that never lands")
    assert not isinstance(caught.value, UsageError)
    assert caught.value.details["errno"] == "EIO"
    monkeypatch.undo()
    assert ws.file_read("keep.txt").text == "old content"
    assert os.listdir(ws.root) == ["keep.txt"]  # no temp file left behind
    # and once the disk behaves, the write goes through with the old mode kept
    result = ws.file_write("keep.txt", "new")
    assert result.changed
    assert os.stat(os.path.join(ws.root, "keep.txt")).st_mode & 0o777 == 0o640


def test_a_write_interrupted_midway_leaves_the_old_file_whole(ws, monkeypatch):
    ws.file_write("keep.txt", "old")
    real_write = os.write

    def half(fd, data):
        real_write(fd, bytes(data[:3]))
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "write", half)
    with pytest.raises(KeyboardInterrupt):
        ws.file_write("keep.txt", "brand new")
    monkeypatch.undo()
    assert ws.file_read("keep.txt").text == "old"
    assert os.listdir(ws.root) == ["keep.txt"]


def test_new_files_get_0644_under_the_umask(ws):
    old = os.umask(0o022)
    try:
        ws.file_write("n.txt", "x")
    finally:
        os.umask(old)
    assert os.stat(os.path.join(ws.root, "n.txt")).st_mode & 0o777 == 0o644


def test_non_unicode_content_is_refused(ws):
    with pytest.raises(UsageError, match="Unicode"):
        ws.file_write("s.txt", "\udcff")


def test_walk_resolves_in_tree_links_like_the_kernel(tmp_path):
    root = tmp_path / "ws"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("found")
    os.symlink("a/b", root / "l1")
    os.symlink("l1/../b/f", root / "a" / "l2")  # physical .. inside a target: a/b/.. is a
    os.symlink("../l1/f", root / "a" / "l3")
    results = {}
    for name in ("walk", *(["openat2"] if HAS_OPENAT2 else [])):
        with Workspace(str(root), resolver=name) as ws:
            results[name] = (
                ws.file_read("l1/f").text,
                ws.file_read("a/l3").text,
                _outcome(ws.file_read, "a/l2"),
            )
    assert results["walk"][:2] == ("found", "found")
    if HAS_OPENAT2:
        assert results["walk"] == results["openat2"]


# --8<-- [start:example]
def test_the_docs_example(tmp_path):
    from stockade.workspace.files import Workspace

    with Workspace(str(tmp_path)) as ws:
        written = ws.file_write("src/app.py", "print('hi')\n")  # parents are made
        assert written.created and written.new_size == 12
        listing = ws.file_list("src")
        assert [(e.name, e.kind, e.size) for e in listing.entries] == [("app.py", "file", 12)]
        read = ws.file_read("src/app.py")
        assert read.text == "print('hi')\n" and not read.truncated
        with pytest.raises(UsageError, match="protected"):  # never inside .git
            ws.file_write(".git/hooks/pre-commit", "#!/bin/sh\n")


# --8<-- [end:example]


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
