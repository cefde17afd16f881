"""What private globs match, found without a regular expression for the usual shapes and
remembered between processes in the store's memory file: never a private file missed.

A new process is this one with its memory forgotten (:func:`stockade.policy.walk.forget`:
what a process holds of the walk is the module's state, nothing else). Each attack has its
control: the memory file is used (the folders are not listed again), so a miss would show.
"""

from __future__ import annotations

import fnmatch
import os
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from stockade.policy import globs as matching
from stockade.policy import walk
from stockade.policy.private import find

GLOBS = ("keys/*", "*.pem", "**/secret*", "docs/?ote[sx]*")
KEYS = {"keys/a.txt", "keys/id"}


@pytest.fixture
def ws(tmp_path: Path) -> str:
    for folder in ("src", "src/deep", "keys", "docs"):
        (tmp_path / "ws" / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / "ws" / folder / "a.txt").write_text("x\n")
    (tmp_path / "ws" / "keys" / "id").write_text("k\n")
    (tmp_path / "walks").mkdir(mode=0o700)
    return str(tmp_path / "ws")


@pytest.fixture
def walks(ws: str) -> str:
    return os.path.join(os.path.dirname(ws), "walks")


def new_process() -> None:
    walk.forget()
    matching.matcher.cache_clear()


def shown(ws: str, walks: str, globs: tuple[str, ...] = GLOBS) -> set[str]:
    return set(find(ws, globs, memory=walks).shown)


def remembered(ws: str, walks: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first process's step: every folder remembered at once, and kept in the file."""
    monkeypatch.setattr(walk, "SETTLED_NS", 0)
    new_process()
    assert shown(ws, walks) == KEYS
    assert os.listdir(walks), "nothing was kept"
    time.sleep(0.05)  # past the clock's tick, so a change moves a folder's change time
    new_process()


def test_control_the_next_process_lists_nothing_it_remembers(ws, walks, monkeypatch) -> None:
    remembered(ws, walks, monkeypatch)
    listed = []
    real = os.scandir
    monkeypatch.setattr(walk.os, "scandir", lambda p: listed.append(p) or real(p))
    assert shown(ws, walks) == KEYS
    assert listed == []  # all from the file: so the attacks below meet the shortcut


@pytest.mark.parametrize(
    "name", ["src/deep/new.pem", "src/deep/secret-plans", "docs/notes.md", "src/secret"]
)
@pytest.mark.parametrize("set_back", [False, True], ids=["as-is", "mtime-set-back"])
def test_a_file_made_just_before_the_step_is_found(ws, walks, monkeypatch, name, set_back) -> None:
    """Each name matches only through a wildcard (an ending, a part, ``?`` and ``[...]``)."""
    remembered(ws, walks, monkeypatch)
    folder = os.path.join(ws, os.path.dirname(name))
    before = os.stat(folder)
    Path(ws, name).write_text("k\n")
    if set_back:  # the change time still moves
        os.utime(folder, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert shown(ws, walks) == {*KEYS, name}


def test_a_folder_swapped_between_processes_is_not_taken_for_it(ws, walks, monkeypatch) -> None:
    remembered(ws, walks, monkeypatch)
    os.rename(os.path.join(ws, "src"), os.path.join(ws, "old-src"))
    os.makedirs(os.path.join(ws, "src", "deep"))
    Path(ws, "src", "deep", "id.pem").write_text("k\n")
    assert shown(ws, walks) == {*KEYS, "src/deep/id.pem"}


def test_a_folder_swapped_back_with_a_new_entry_is_listed(ws, walks, monkeypatch) -> None:
    remembered(ws, walks, monkeypatch)
    deep = os.path.join(ws, "src", "deep")
    os.rename(deep, deep + "-away")
    Path(deep + "-away", "k.pem").write_text("k\n")
    os.rename(deep + "-away", deep)  # the same inode, back under its name
    assert shown(ws, walks) == {*KEYS, "src/deep/k.pem"}


def test_another_glob_list_never_uses_the_memory(ws, walks, monkeypatch) -> None:
    remembered(ws, walks, monkeypatch)
    assert shown(ws, walks, ("src/*",)) == {"src/a.txt", "src/deep"}
    new_process()
    want = {"docs/a.txt", "keys/a.txt", "src/a.txt", "src/deep/a.txt"}
    assert shown(ws, walks, ("**/a.txt",)) == want


@pytest.mark.parametrize("garbage", [b"", b"\x00junk", b"not marshal at all" * 10])
def test_a_memory_file_that_is_not_ours_is_ignored(ws, walks, monkeypatch, garbage) -> None:
    remembered(ws, walks, monkeypatch)
    for name in os.listdir(walks):
        Path(walks, name).write_bytes(garbage)
    Path(ws, "src", "deep", "late.pem").write_text("k\n")
    assert shown(ws, walks) == {*KEYS, "src/deep/late.pem"}


def test_no_regular_expression_for_the_usual_shapes() -> None:
    globs = matching.Globs(("keys/*", "*.pem", "**/secret*", "id_rsa", "deep/x/*"))
    assert globs.matches("", ["keys/a", "x.pem", "a/secret-1", "id_rsa", "readme"]) == [
        True,
        True,
        True,
        True,
        False,
    ]
    assert globs._compiled == {}  # nothing compiled


# --- any tree, any globs: the same as fnmatch over every path ---------------------------------

NAMES = st.sampled_from(["a", "b", "ab", "x.pem", "secret", "s1", "key.txt", ".hid"])
TREES = st.lists(st.lists(NAMES, min_size=1, max_size=4).map("/".join), max_size=12)
PIECES = st.sampled_from(["a", "b", "x", ".pem", "secret", "s", "/", "*", "**", "?", "[ab]", "k"])
WORD = st.sampled_from(["a", "b", "ab", "x", ".pem", "secret", "s", "key", "/a", "b/"])
SHAPED = st.builds(  # the shapes matched without an expression: `w`, `w*`, `*w`, `*w*`, `**/w*`
    lambda shape, word: shape.replace("W", word),
    st.sampled_from(["W", "W*", "*W", "*W*", "**/W*", "W/*", "W**", "**W**"]),
    WORD,
)
GLOB = st.one_of(SHAPED, st.lists(PIECES, min_size=1, max_size=5).map("".join))


def reference(ws: str, globs: list[str]) -> set[str]:
    """Every path under ``ws`` a glob matches (``fnmatch`` of its relative path), outer
    ones only."""
    paths = []
    for here, folders, files in os.walk(ws):
        for name in (*folders, *files):
            paths.append(os.path.relpath(os.path.join(here, name), ws))
    hit = sorted(p for p in paths if any(fnmatch.fnmatchcase(p, g) for g in globs))
    return {p for p in hit if not any(p.startswith(o + "/") for o in hit if o != p)}


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(tree=TREES, globs=st.lists(GLOB, min_size=1, max_size=4))
def test_find_matches_fnmatch_over_every_path(tmp_path_factory, tree, globs) -> None:
    root = tmp_path_factory.mktemp("tree")
    ws, walks = root / "ws", root / "walks"
    ws.mkdir()
    walks.mkdir()
    for path in tree:
        parent = (ws / path).parent
        if any(
            p.is_file() for p in (parent, *parent.parents) if p != ws and str(p).startswith(str(ws))
        ):
            continue  # a file already stands where a folder would go
        parent.mkdir(parents=True, exist_ok=True)
        if not (ws / path).exists():
            (ws / path).write_text("x")
    globs = [g for g in globs if not g.startswith("/") and re.sub(r"\*+", "*", g) != "/"]
    want = reference(str(ws), globs)
    new_process()
    assert set(find(str(ws), globs, memory=str(walks)).shown) == want
    walk.SETTLED_NS, settled = 0, walk.SETTLED_NS
    try:
        new_process()
        find(str(ws), globs, memory=str(walks))  # remembered, and kept in the file
        new_process()
        assert set(find(str(ws), globs, memory=str(walks)).shown) == want  # from the file
    finally:
        walk.SETTLED_NS = settled


# --- a name at a time, brackets and stars anywhere: the same as fnmatch -----------------------

BRACKETED = st.lists(
    st.sampled_from(["a", "-", "*", "**", "?", "[", "]", "!", "[a-**]", "[!*]", "[]*]", "/"]),
    min_size=1,
    max_size=6,
).map("".join)


@example(glob="[a-**]", name="*")
@example(glob="x[]**]", name="x*")
@settings(max_examples=400)
@given(glob=BRACKETED, name=st.text(alphabet="a-*?[]!/b", max_size=5))
def test_a_name_matches_as_fnmatch_says_with_stars_in_brackets(glob: str, name: str) -> None:
    # `**` is made `*` outside brackets only: inside one, `*` is a character of the class
    # (made one star there, `[a-**]` lost the `*` it holds).
    assert matching.Globs((glob,)).matches("", [name]) == [fnmatch.fnmatchcase(name, glob)]
