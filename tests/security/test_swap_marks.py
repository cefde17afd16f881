"""The two host-side leftovers of the symlink-swap work: the breaker's marking of what a
private run wrote, and the quota's size count.

A file-tool write of a run holding private data marks the file private in the sidecar. Done
by resolving the path again, a folder swapped for a link between the write and the marking
marks the link's target (a decoy) and leaves the private file unmarked; the next run sends
it out unasked. The mark now goes to the name the write itself gave (its folder
descriptor). A command's changed files are marked by the names of the changes listing
(descriptor-based), never resolved again.

The quota's count walked by path: a folder swapped for a link while it is counted brought
in the sizes of files outside the workspace. It now walks by folder descriptors.

Each swap is made deterministic by wrapping a function so it lands at the worst moment;
each attack has a control doing the same by path on the same swapped layout.
"""

from __future__ import annotations

import os

import pytest

from helpers.recording import CURL
from stockade.config.schema import Config, NetworkConfig
from stockade.conformance.procs import open_fds
from stockade.errors import PolicyHeld
from stockade.record.chain import rows
from stockade.request.spec import Profile


@pytest.fixture
def ws(box):
    (box.ws / "private").mkdir()
    (box.ws / "private" / "notes.txt").write_text(box.canary + "\n")
    (box.ws / "out").mkdir()
    (box.ws / "decoy").mkdir()
    (box.ws / "decoy" / "secret.txt").write_text("nothing private\n")
    return box.ws


def _config(box, port: int) -> Config:
    return Config(
        sandbox=box.sandbox,
        agents={
            "a": Profile(
                name="a",
                hosts=(f"allowed.test:{port}",),
                ask=(),
                workspace=str(box.ws),
                private=("private/*",),
            )
        },
        network=NetworkConfig(resolve={"allowed.test": "127.0.0.1"}),
    )


def _send(port: int, what: str) -> list[str]:
    return [CURL, "-sS", "--max-time", "20", "--data-binary", what, f"http://allowed.test:{port}/"]


def _marked(host, box) -> list[str]:
    return host.breaker.files().named(os.path.realpath(box.ws), [""])


def _swap(ws, folder: str = "out", aside: str = "out.real") -> None:
    """``ws/out`` becomes a link to ``decoy`` (the real folder kept as ``out.real``)."""
    os.rename(ws / folder, ws / aside)
    os.symlink("decoy", ws / folder)


def _unswap(ws, folder: str = "out", aside: str = "out.real") -> None:
    os.unlink(ws / folder)
    os.rename(ws / aside, ws / folder)


def _private_run(make_host, box, port: int):
    """A host whose run holds private data (a file-tool read of a private path)."""
    from stockade.workspace.files import Workspace

    host = make_host(config=_config(box, port))
    with Workspace(str(box.ws)) as files:
        files.file_read("private/notes.txt")
    host.breaker.file_tool("read", str(box.ws), "private/notes.txt", host.config.profile("a"))
    return host


def _next_run_is_held(make_host, box, port: int, upstream, name: str) -> None:
    """A new run cannot read ``name`` (nothing in its name is private: it is marked) unless
    granted it; granted, it posts it: held."""
    nxt = make_host(config=_config(box, port))
    hidden = nxt.run(box.request(["cat", name], profile="a"))
    assert box.canary not in hidden.stdout.text
    granted = nxt.run(box.request(["cat", name], profile="a", read_private=True))
    assert granted.stdout.text == box.canary + "\n"
    with pytest.raises(PolicyHeld, match="grant read-private: .*" + name.replace(".", r"\.")):
        nxt.run(box.request(_send(port, "@" + name), profile="a", read_private=True))
    assert upstream.seen == []


def test_a_swap_between_a_write_and_its_mark_leaves_the_private_file_marked(
    make_host,
    box,
    ws,
    upstream,
    monkeypatch,
) -> None:
    from stockade.workspace.files import Workspace

    host = _private_run(make_host, box, upstream.port)
    profile = host.config.profile("a")
    with Workspace(str(box.ws)) as files:
        written = files.file_write("out/secret.txt", box.canary + "\n")
    assert written.written_as == "out/secret.txt"
    breaker, real = host.breaker, host.breaker._holds_private

    def racing(*args, **kwargs):  # the first thing the marking does: swap right then
        _swap(box.ws)
        return real(*args, **kwargs)

    monkeypatch.setattr(breaker, "_holds_private", racing)
    breaker.file_tool("write", str(box.ws), "out/secret.txt", profile, written=written)
    monkeypatch.setattr(breaker, "_holds_private", real)
    _unswap(box.ws)  # the command puts the folder back: the private file is out/secret.txt
    assert _marked(host, box) == ["out/secret.txt"]
    _next_run_is_held(make_host, box, upstream.port, upstream, "out/secret.txt")


def test_control_a_by_path_mark_through_the_swap_names_the_decoy(box, ws) -> None:
    (box.ws / "out" / "secret.txt").write_text(box.canary)
    _swap(box.ws)
    by_path = os.path.realpath(box.ws / "out" / "secret.txt")
    assert os.path.relpath(by_path, os.path.realpath(box.ws)) == "decoy/secret.txt"


def test_a_write_into_a_folder_moved_during_it_marks_where_it_landed(
    make_host,
    box,
    ws,
    upstream,
    monkeypatch,
) -> None:
    """The folder is swapped after the write opened it: the file lands in ``out.real``; the
    mark goes there (not to ``decoy/secret.txt`` that ``out/secret.txt`` now leads to), and
    the name unlike the one asked is recorded."""
    from stockade.workspace.files import Workspace

    host = _private_run(make_host, box, upstream.port)
    real = Workspace._parent

    def racing(self, parts, *, make):
        fd = real(self, parts, make=make)
        _swap(box.ws)
        return fd

    monkeypatch.setattr(Workspace, "_parent", racing)
    with Workspace(str(box.ws)) as files:
        written = files.file_write("out/secret.txt", box.canary + "\n")
    monkeypatch.setattr(Workspace, "_parent", real)
    assert written.written_as == "out.real/secret.txt"
    assert (box.ws / "out.real" / "secret.txt").read_text() == box.canary + "\n"
    profile = host.config.profile("a")
    host.breaker.file_tool("write", str(box.ws), "out/secret.txt", profile, written=written)
    assert _marked(host, box) == ["out.real/secret.txt"]
    found = [
        (row.body["source"], row.body["detail"])
        for row in rows(host.store, host.run_id)
        if row.kind == "taint"
    ]
    assert ("private-file", "out/secret.txt: written as 'out.real/secret.txt'") in found
    _next_run_is_held(make_host, box, upstream.port, upstream, "out.real/secret.txt")


def test_a_commands_changed_files_are_marked_by_their_listed_names(
    make_host,
    box,
    ws,
    upstream,
    monkeypatch,
) -> None:
    """A command of a private run copies the private file; ``out`` is swapped for a link
    between the changes listing and the marking: the listed name is marked, not the one the
    link leads to."""
    host = make_host(config=_config(box, upstream.port))
    breaker, real = host.breaker, host.breaker._holds_private
    swapped: list[bool] = []

    def racing(*args, **kwargs):
        if not swapped and (box.ws / "out" / "copy.txt").exists():
            _swap(box.ws)
            swapped.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(breaker, "_holds_private", racing)
    copy = ["cp", "private/notes.txt", "out/copy.txt"]
    result = host.run(box.request(copy, profile="a", read_private=True))
    monkeypatch.setattr(breaker, "_holds_private", real)
    assert result.exit_code == 0, result.stderr.text
    assert result.changes is not None and "out/copy.txt" in result.changes.created
    assert swapped
    _unswap(box.ws)
    assert _marked(host, box) == ["out/copy.txt"]
    _next_run_is_held(make_host, box, upstream.port, upstream, "out/copy.txt")


# --- the quota's count -------------------------------------------------------------------

BIG = 1 << 20


def _quota_layout(tmp_path):
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "sub").mkdir(parents=True)
    (ws / "sub" / "mine").write_text("x")
    (ws / "top").write_text("yy")
    outside.mkdir()
    (outside / "big").write_bytes(b"\1" * BIG)  # the canary: sizes that are not the workspace's
    return ws


def _racing(monkeypatch, ws) -> list[bool]:
    """Swap ``ws/sub`` for a link to ``../outside`` at the last moment before a walk enters
    it: right before it is listed by path, or opened from its folder's descriptor."""
    swapped: list[bool] = []
    sub = str(ws / "sub")

    def swap() -> None:
        if not swapped:
            os.rename(sub, sub + ".old")
            os.symlink("../outside", sub)
            swapped.append(True)

    real_open, real_scandir = os.open, os.scandir

    def opening(path, flags, mode=0o777, *, dir_fd=None):
        if path == sub or (dir_fd is not None and path == "sub"):
            swap()
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def scandir(path="."):
        if path == sub:
            swap()
        return real_scandir(path)

    monkeypatch.setattr(os, "open", opening)
    monkeypatch.setattr(os, "scandir", scandir)
    return swapped


def _by_path_usage(folder: str) -> int:
    """The count as it was: a walk by path."""
    size = 0
    for root, dirs, names in os.walk(folder):
        for name in names:
            size += os.lstat(os.path.join(root, name)).st_size
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
    return size


def test_control_a_by_path_count_through_the_swap_counts_outside_files(tmp_path, monkeypatch):
    ws = _quota_layout(tmp_path)
    swapped = _racing(monkeypatch, ws)
    assert _by_path_usage(str(ws)) >= BIG
    assert swapped


def test_the_workspace_count_never_counts_beyond_a_folder_swapped_while_walked(
    tmp_path, monkeypatch
):
    from stockade.workspace.folders import usage

    ws = _quota_layout(tmp_path)
    assert usage(str(ws)) == (3, 2)
    swapped = _racing(monkeypatch, ws)
    size, files = usage(str(ws))
    assert swapped
    assert size < BIG and files <= 2, (size, files)


def test_the_quota_count_never_counts_beyond_a_folder_swapped_while_walked(tmp_path, monkeypatch):
    from stockade.run.quota import usage

    ws = _quota_layout(tmp_path)
    before = usage(str(ws))
    assert 0 < before < BIG
    swapped = _racing(monkeypatch, ws)
    after = usage(str(ws))
    assert swapped
    assert after < BIG, after


def test_the_walk_holds_one_descriptor_a_level_and_skips_a_fifo_behind_a_link(tmp_path):
    """A deep tree is walked whole; a link to a FIFO is counted as a link, never opened."""
    from stockade.workspace.folders import statuses, usage

    ws = tmp_path / "ws"
    deep = ws.joinpath(*["d"] * 60)
    deep.mkdir(parents=True)
    (deep / "leaf").write_text("abc")
    os.mkfifo(tmp_path / "fifo")
    os.symlink("../fifo", ws / "d" / "link")
    before = open_fds()
    assert usage(str(ws)) == (3 + len("../fifo"), 2)
    assert sum(1 for _ in statuses(str(ws))) == 62
    assert not open_fds() - before  # other tests' threads may close theirs meanwhile
