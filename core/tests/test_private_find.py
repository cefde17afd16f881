"""Finding private data: what a folder matched is remembered only while its change time
stays, so a private file added since (whatever the folder's mtime is set back to) is found."""

from __future__ import annotations

import os
import time

import pytest

from stockade.policy import walk
from stockade.policy.private import find

GLOBS = ("*.pem", "**/secret*", "keys/*")
KEYS = ("keys/a.txt", "keys/id")


@pytest.fixture
def ws(tmp_path):
    for folder in ("src", "src/deep", "keys", "docs"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "a.txt").write_text("x\n")
    (tmp_path / "keys" / "id").write_text("k\n")
    return str(tmp_path)


def shown(ws: str) -> set[str]:
    return set(find(ws, GLOBS).shown)


def test_a_folder_changed_just_now_is_listed_again_every_time(ws) -> None:
    walk._SEEN.clear()
    assert shown(ws) == {*KEYS}
    assert not any(key[0].startswith(ws) for key in walk._SEEN)  # changed < 2 s ago
    with open(os.path.join(ws, "src", "deep", "b.pem"), "w") as file:
        file.write("k\n")
    assert shown(ws) == {*KEYS, "src/deep/b.pem"}


@pytest.mark.parametrize("set_back", [False, True], ids=["as-is", "mtime-set-back"])
def test_a_private_file_added_to_a_remembered_folder_is_found(
    ws, monkeypatch: pytest.MonkeyPatch, set_back: bool
) -> None:
    monkeypatch.setattr(walk, "SETTLED_NS", 0)  # remember every folder at once
    walk._SEEN.clear()
    assert shown(ws) == {*KEYS}
    assert any(key[0] == os.path.join(ws, "src", "deep") for key in walk._SEEN)
    assert shown(ws) == {*KEYS}  # from memory: nothing listed again
    deep = os.path.join(ws, "src", "deep")
    before = os.stat(deep)
    time.sleep(0.05)  # past the clock's tick, so the change time moves
    for name in ("c.pem", "secret-notes.txt"):
        with open(os.path.join(deep, name), "w") as file:
            file.write("k\n")
    if set_back:  # a command hides the change from the mtime: the change time still moves
        os.utime(deep, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert os.stat(deep).st_mtime_ns == before.st_mtime_ns
    assert shown(ws) == {*KEYS, "src/deep/c.pem", "src/deep/secret-notes.txt"}


def test_a_folder_swapped_for_another_is_not_taken_for_it(ws, monkeypatch) -> None:
    monkeypatch.setattr(walk, "SETTLED_NS", 0)
    walk._SEEN.clear()
    assert shown(ws) == {*KEYS}
    time.sleep(0.05)
    os.rename(os.path.join(ws, "docs"), os.path.join(ws, "old-docs"))
    os.mkdir(os.path.join(ws, "docs"))
    with open(os.path.join(ws, "docs", "x.pem"), "w") as file:
        file.write("k\n")
    assert shown(ws) == {*KEYS, "docs/x.pem"}


def test_two_glob_lists_never_share_what_a_folder_matched(ws, monkeypatch) -> None:
    monkeypatch.setattr(walk, "SETTLED_NS", 0)
    walk._SEEN.clear()
    assert set(find(ws, ("keys/*",)).shown) == set(KEYS)
    assert set(find(ws, ("src/*",)).shown) == {"src/a.txt", "src/deep"}
    assert set(find(ws, ("**/a.txt",)).shown) == {
        "docs/a.txt", "keys/a.txt", "src/a.txt", "src/deep/a.txt",
    }  # fmt: skip
