"""A folder tree deeper than Python's recursion limit no longer bricks a store (the review's
attack: a command makes 1,200 folders one in another, each from its parent's descriptor).

Removing a layer (:func:`stockade.trees.remove_tree`), listing it for a dry run
(:func:`stockade.layers.survey.survey`) and measuring it for the quota
(:meth:`stockade.layers.session.Session.growth`) walk it without recursion and with a
bounded number of descriptors (the survey lists what landing would land: folders
:data:`~stockade.layers.commit.DEPTH` deep, the one below named in ``failed``); a journal
entry whose finishing raises anything is discarded and reported, and the next entries, the
next start, the next command, go on. Each has its control: the walks used before
(:func:`os.fwalk`, :func:`os.walk`) raise ``RecursionError`` on the same tree, a walk holding
a descriptor per folder runs out of them under the same limit, and the unguarded finishing
raises out of the journal.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade import trees
from stockade.config.schema import Config, store_folder
from stockade.conformance.ground import PYTHON
from stockade.errors import UsageError
from stockade.layers import Rules, Tally, journal, place
from stockade.layers.commit import DEPTH as LANDS
from stockade.layers.place import Layer
from stockade.layers.session import Session
from stockade.layers.survey import TOO_LONG, survey
from stockade.request import wire
from stockade.request.spec import ExecRequest
from stockade.testing import EventLog

DEPTH = 1_500
LEAF = b"x" * 10_000
DEAD = {"pid": 2**22 + 1, "started": 1}  # a host that is gone


def _deep(top: str, depth: int = DEPTH, name: str = "d") -> None:
    """``depth`` folders ``name`` one in another under ``top``, each made from its parent's
    descriptor (as the review's command did: no path that long is ever used), and a file
    ``leaf`` at the bottom."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        leaf = os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf, LEAF)
        os.close(leaf)
    finally:
        os.close(fd)


def _depth(top: str) -> int:
    """How many folders ``d`` are in one another under ``top`` (by descriptors)."""
    fd, found = os.open(top, os.O_RDONLY | os.O_DIRECTORY), 0
    while "d" in os.listdir(fd):
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd, found = inner, found + 1
    os.close(fd)
    return found


def _layer(tmp_path: Path, name: str = "layer", depth: int = DEPTH, folder: str = "d") -> Layer:
    root = tmp_path / f"{name}-root"
    root.mkdir()
    (root / "existing").write_text("x")
    layer = Layer(str(root), str(tmp_path / name), str(tmp_path / "store"))
    Path(layer.upper).mkdir(parents=True)
    Path(layer.work).mkdir()
    (Path(layer.upper) / "first").write_text("1")
    _deep(layer.upper, depth, folder)
    return layer


@pytest.fixture
def layer(tmp_path: Path) -> Iterator[Layer]:
    made = _layer(tmp_path)
    yield made
    # pytest's own cleanup of old temporary folders recurses: never leave it a deep tree.
    subprocess.run(["rm", "-rf", str(tmp_path)], check=False)


@contextlib.contextmanager
def _descriptors(room: int) -> Iterator[None]:
    """This process may open only ``room`` more descriptors (``RLIMIT_NOFILE``) meanwhile."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest = max(int(n) for n in os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 1 + room, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


ROOM = trees.WINDOW + 16
"""The descriptors a walk may open: its window and a few (a listing's own, the root's)."""


def _old_remove_tree(folder: str) -> None:
    """The control: :func:`~stockade.trees.remove_tree` as it was (recursive)."""
    for _, folders, _, directory in os.fwalk(folder, follow_symlinks=False):
        for name in folders:
            with contextlib.suppress(OSError):
                trees._own(directory, name)  # the old body, as it was
    shutil.rmtree(folder, ignore_errors=True)


def _chain_of_descriptors(top: str) -> None:
    """The control for the limit: a walk that holds one descriptor per folder."""
    held = [os.open(top, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        while "d" in os.listdir(held[-1]):
            held.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=held[-1]))
    finally:
        for fd in held:
            os.close(fd)


@pytest.mark.parametrize("remove", ["walk", "control"])
def test_a_deep_layer_is_removed_with_few_descriptors(layer, remove):
    assert _depth(layer.upper) == DEPTH
    if remove == "control":  # the breach: both old walks recurse, and give up half-way
        with pytest.raises(RecursionError):
            _old_remove_tree(layer.folder)
        with _descriptors(ROOM), pytest.raises(OSError) as error:
            _chain_of_descriptors(layer.upper)
        assert error.value.errno == errno.EMFILE
        assert os.path.isdir(layer.upper)
        return
    with _descriptors(ROOM):
        trees.remove_tree(layer.folder)
    assert not os.path.lexists(layer.folder)
    assert os.listdir(layer.root) == ["existing"]


def test_a_deep_layer_whose_folders_lost_their_rights_is_removed(layer):
    fd = os.open(layer.upper, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(DEPTH):  # every folder 0500, as a command may leave them
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.chmod(f"/proc/self/fd/{inner}", 0o500)
        os.close(fd)
        fd = inner
    os.close(fd)
    trees.remove_tree(layer.folder)
    assert not os.path.lexists(layer.folder)


def test_the_old_walks_recurse_on_the_deep_tree(layer):
    """The control for the survey and the quota: both walked with :func:`os.walk`."""
    with pytest.raises(RecursionError):
        list(os.walk(layer.upper))
    with pytest.raises(RecursionError):
        list(os.fwalk(layer.upper, follow_symlinks=False))


def _allocated(top: str) -> int:
    """The bytes every entry under ``top`` takes (GNU find: no recursion limit)."""
    found = subprocess.run(
        ["find", top, "-mindepth", "1", "-printf", "%b\\n"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sum(int(blocks) for blocks in found) * 512


def test_survey_lists_a_deep_layer_and_growth_measures_it(layer, tmp_path):
    rules = Rules(str(tmp_path / "quarantine"))
    with _descriptors(ROOM):
        tally = survey((layer,), rules)
    # As landing takes it: folders land LANDS deep, the one below is named in failed.
    folders = [os.path.join(layer.root, *["d"] * n) + "/" for n in range(1, LANDS + 1)]
    assert sorted(tally.created) == sorted([os.path.join(layer.root, "first"), *folders])
    [deeper] = tally.failed
    assert deeper == f"{folders[-1]}d: nested deeper than {LANDS} folders; not landed"
    assert tally.modified == tally.deleted == tally.quarantined == []
    session = Session(
        (layer,), rules, store=str(tmp_path / "store"), action_id="deep", workspace=layer.root
    )
    with _descriptors(ROOM):
        grown = session.growth()
    assert grown == _allocated(layer.upper)  # nothing of it is in the root: all of it counts
    assert grown >= len(LEAF) + DEPTH * 4096  # the folders too: each takes a block
    session.end(keep=False)
    assert not os.path.lexists(layer.folder)


def test_survey_names_where_paths_grow_too_long_and_growth_counts_it_all(tmp_path):
    long = "n" * 200
    depth = trees.PATH_MAX // len(long) + 5  # past PATH_MAX, far from the landing's depth
    assert depth < LANDS
    layer = _layer(tmp_path, depth=depth, folder=long)
    try:
        tally = survey((layer,), Rules(str(tmp_path / "quarantine")))
        assert tally.created, "what fits is listed"
        assert all(len(path.rstrip("/")) < trees.PATH_MAX for path in tally.created)
        [stopped] = tally.failed
        assert stopped.endswith(f"/: {TOO_LONG}")
        assert f"{stopped.split('/: ')[0]}/" in tally.created  # where it stopped is listed
        assert len(tally.created) < depth
        session = Session(
            (layer,), Rules(""), store=str(tmp_path / "store"), action_id="x", workspace="/"
        )
        assert session.growth() == _allocated(layer.upper)  # the quota sees all of it
        session.end(keep=False)
        assert not os.path.lexists(layer.folder)
    finally:
        subprocess.run(["rm", "-rf", str(tmp_path)], check=False)


def _left(store: str, action_id: str, layer: Layer, state: journal.State = "landing") -> None:
    """A journal entry a dead host left."""
    entry = journal.Entry(
        action_id, state=state, layers=(layer,), rules=Rules(f"{store}/q/{action_id}"), **DEAD
    )
    journal.write(store, entry)


def _plain(tmp_path: Path, name: str) -> Layer:
    root = tmp_path / f"{name}-root"
    root.mkdir()
    layer = Layer(str(root), str(tmp_path / name), str(tmp_path / "store"))
    Path(layer.upper).mkdir(parents=True)
    Path(layer.work).mkdir()
    (Path(layer.upper) / f"{name}.txt").write_text(name)
    return layer


def _fault(monkeypatch: pytest.MonkeyPatch, fault: str, deep: Layer) -> None:
    """Make finishing the entry of layer ``deep`` raise: its landing raises as the recursive
    landing did (``landing``), or its layers are removed by the old recursive walk, which
    raises on its own on that tree (``discarding``)."""
    if fault == "discarding":
        monkeypatch.setattr(journal, "discard", lambda ls: [_old_remove_tree(x.folder) for x in ls])
        return
    real = journal.land

    def land(layer: Layer, rules: Rules, tally: Tally) -> None:
        if layer.root == deep.root:
            raise RecursionError("maximum recursion depth exceeded")
        real(layer, rules, tally)

    monkeypatch.setattr(journal, "land", land)


def _old_settle(entry: journal.Entry, store: str) -> journal.Recovery:
    """The control: finishing an entry as it was (only an ``OSError`` was caught)."""
    tally = Tally()
    for layer in entry.layers if entry.state == "landing" else ():
        with contextlib.suppress(OSError):
            journal.land(layer, entry.rules, tally)
    journal.discard(entry.layers)
    return journal.Recovery(entry.action_id, outcome="finished", roots=(store,))


@pytest.mark.parametrize("guard", ["guarded", "control"])
@pytest.mark.parametrize("fault", ["landing", "discarding"])
def test_an_entry_whose_finishing_raises_never_stops_the_others(
    layer, tmp_path, monkeypatch, fault, guard
):
    store = str(tmp_path / "store")
    before, after, dropped = (_plain(tmp_path, n) for n in ("a", "z", "r"))
    _left(store, "a-before", before)
    _left(store, "m-deep", layer)
    _left(store, "r-running", dropped, state="running")
    _left(store, "z-after", after)
    _fault(monkeypatch, fault, layer)
    if guard == "control":  # the breach: the one entry stops every recovery, every time
        monkeypatch.setattr(journal, "_settle", _old_settle)
        for _ in range(2):
            with pytest.raises(RecursionError):
                journal.recover(store)
        assert "m-deep.json" in os.listdir(journal.folder(store))
        return
    done = {r.action_id: r for r in journal.recover(store)}
    assert set(done) == {"a-before", "m-deep", "r-running", "z-after"}
    assert Path(before.root, "a.txt").read_text() == "a"
    assert Path(after.root, "z.txt").read_text() == "z"
    assert not Path(dropped.root, "r.txt").exists() and done["r-running"].outcome == "discarded"
    assert any("RecursionError" in failed for failed in done["m-deep"].failed), done["m-deep"]
    assert not any(r.failed for name, r in done.items() if name != "m-deep")
    assert os.listdir(journal.folder(store)) == []
    assert journal.recover(store) == []  # the next start finds nothing left to trip on
    if fault == "landing":
        assert not os.path.lexists(layer.folder)  # discarded, deep as it is


ODD = (b'{"action_id": "odd"}', b"[" * 100_000 + b"]" * 100_000)
"""Journal files that are no entry: a malformed one, one nested too deep for the parser."""


@pytest.mark.parametrize("text", ODD, ids=["malformed", "nested"])
def test_a_journal_file_that_is_no_entry_is_passed_over(tmp_path, text):
    store = str(tmp_path / "store")
    layer = _plain(tmp_path, "a")
    _left(store, "a", layer)
    odd = Path(journal.folder(store), "0-odd.json")
    odd.write_bytes(text)
    with pytest.raises((UsageError, RecursionError)) as error:  # the control: reading raises
        wire.from_json(text, journal.Entry)
    assert not isinstance(error.value, OSError | ValueError)  # what was passed over before
    assert [r.action_id for r in journal.recover(store)] == ["a"]
    assert Path(layer.root, "a.txt").read_text() == "a"
    assert odd.exists()  # another format's, or one being written: not ours to judge


@pytest.mark.parametrize("guard", ["guarded", "control"])
def test_the_next_command_runs_after_a_left_landing_that_raises(
    tmp_path, make_host, monkeypatch, guard
):
    store = store_folder(Config())
    (tmp_path / "root").mkdir()
    made = place.make((str(tmp_path / "root"),), store, "deep")
    assert made is not None
    _deep(made[0].upper)
    rules = Rules(os.path.join(store, "quarantine", "deep"))
    journal.write(store, journal.Entry("deep", state="landing", layers=made, rules=rules, **DEAD))
    _fault(monkeypatch, "landing", made[0])
    if guard == "control":
        monkeypatch.setattr(journal, "_settle", _old_settle)
    log = EventLog()
    host = make_host(allow_all=True, config=Config(sandbox="bubblewrap"), plugins=[log])
    (tmp_path / "work").mkdir()
    request = ExecRequest(("sh", "-c", "echo ok > f"), str(tmp_path / "work"))
    try:
        if guard == "control":  # the breach: every command on this store fails
            with pytest.raises(RecursionError):
                host.run(request)
            return
        assert host.run(request).ok
        assert (tmp_path / "work" / "f").read_text() == "ok\n"
        [event] = [e for e in log.events if e.kind == "layer"]
        assert event.action_id == "deep" and any("RecursionError" in f for f in event.failed)
        assert not os.path.lexists(made[0].folder)
    finally:
        subprocess.run(["rm", "-rf", made[0].folder], check=False)


MAKE_DEEP = f"""
import os
open("aaa_first", "w").write("1")
fd = os.open(".", os.O_RDONLY)
for _ in range({DEPTH}):
    os.mkdir("d", dir_fd=fd); inner = os.open("d", os.O_RDONLY, dir_fd=fd); os.close(fd); fd = inner
os.close(os.open("leaf", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
"""


def test_a_dry_run_of_a_command_that_makes_a_deep_tree_lists_it_and_leaves_nothing(
    tmp_path, make_host
):
    work = tmp_path / "work"
    work.mkdir()
    host = make_host(allow_all=True, config=Config(sandbox="bubblewrap"))
    request = ExecRequest((PYTHON, "-S", "-c", MAKE_DEEP), str(work), dry_run=True)
    result = host.run(request)
    assert result.exit_code == 0, result.stderr.text
    assert result.landed == "discarded"
    assert result.changes is not None
    assert result.changes.total == LANDS + 1  # aaa_first, the folders that would land
    assert result.changes.created[:2] == ("aaa_first", "d/")
    assert result.changes.created[-1] == "d/" * LANDS
    assert os.listdir(work) == []  # nothing landed
    store = store_folder(Config())
    assert os.listdir(os.path.join(store, place.LAYERS)) == [journal.JOURNAL]
    assert os.listdir(journal.folder(store)) == []
