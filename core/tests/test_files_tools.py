"""The file tools do what they say inside the workspace: write, read and list, windows and
caps, binary files described, protected paths never written, a failed write leaving the old
file whole. The docs' example (docs/files.md) is included from this file.

The tests with a workspace run against both resolvers (the ``ws`` fixture takes the
``resolver`` one): ``openat2`` (skipped where the kernel lacks it) and the walk."""

from __future__ import annotations

import errno
import hashlib
import os

import pytest
from files_helpers import HAS_OPENAT2, _outcome

from stockade.errors import BadCwd, StockadeError, UsageError
from stockade.workspace import files
from stockade.workspace.file_types import READ_LIMIT, WRITE_LIMIT
from stockade.workspace.files import Workspace

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
