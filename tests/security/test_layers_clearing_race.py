"""A person's change made while a landing deletes a tree (last sessions' noticed list): the
tree was judged, then removed whole, so a change made between the two went with it. Now the
tree is renamed aside and judged again there: a change made during the first judgement keeps
it (renamed back, a conflict), and one made after the rename cannot reach it by its path.
Each case makes the person's change exactly in that window (the first judgement returns,
then the change is made); the control makes none, and the deletion lands. Run against the
code before this change, the changed cases lose the person's change."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stockade.config.schema import Config
from stockade.layers import clearing
from stockade.layers.rules import Rules, Tally


def _in_window(
    monkeypatch: pytest.MonkeyPatch,
    first: Callable[[], object] | None,
    second: Callable[[], object] | None = None,
) -> None:
    """Do ``first`` once the first judgement of a tree returns, ``second`` once the
    judgement of the moved tree begins."""
    real = clearing.judged
    done: set[str] = set()

    def judged(dst, name, target, rules, *, moved=False):  # type: ignore[no-untyped-def]
        if moved and second is not None and "second" not in done:
            done.add("second")
            second()
        found = real(dst, name, target, rules, moved=moved)
        if not moved and first is not None and "first" not in done and found[0] is None:
            done.add("first")
            first()
        return found

    monkeypatch.setattr(clearing, "judged", judged)


def _tree(ws: Path) -> Rules:
    """A tree to delete in ``ws`` (made if missing), and rules whose command began after it."""
    ws.mkdir(exist_ok=True)
    (ws / "d" / "lib").mkdir(parents=True)
    (ws / "d" / "a").write_text("original")
    (ws / "notes").write_text("original")
    time.sleep(0.05)  # older than the command by more than a clock tick
    since = time.time_ns()
    time.sleep(0.05)
    return Rules(str(ws.parent / "quarantine"), since=since)


def _aside(ws: Path) -> list[str]:
    """What stands under a clearing's aside name in ``ws`` (nothing, once a landing ends)."""
    return [p for p in os.listdir(ws) if p.startswith(clearing.ASIDE)]


CHANGES: dict[str, tuple[str, Callable[[Path], object], Callable[[Path], bool]]] = {
    "an edit in the tree": (
        "d",
        lambda ws: (ws / "d" / "a").write_text("a person's"),
        lambda ws: (ws / "d" / "a").read_text() == "a person's",
    ),
    "a file added to it": (
        "d",
        lambda ws: (ws / "d" / "lib" / "new.txt").write_text("a person's"),
        lambda ws: (ws / "d" / "lib" / "new.txt").read_text() == "a person's",
    ),
    "a repository made in it": (
        "d",
        lambda ws: subprocess.run(["git", "init", "-q", str(ws / "d" / "lib")], check=True),
        lambda ws: (ws / "d" / "lib" / ".git" / "HEAD").is_file(),
    ),
    "an edit of a file": (
        "notes",
        lambda ws: (ws / "notes").write_text("a person's"),
        lambda ws: (ws / "notes").read_text() == "a person's",
    ),
}


def _remove(ws: Path, name: str, rules: Rules) -> tuple[bool, Tally]:
    tally = Tally()
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        went = clearing.remove_unless(fd, name, str(ws / name), rules, tally)
    finally:
        os.close(fd)
    return went, tally


@pytest.mark.parametrize("case", list(CHANGES))
@pytest.mark.parametrize("meanwhile", [True, False], ids=["changed", "control"])
def test_a_change_made_while_a_tree_is_judged_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, meanwhile: bool
) -> None:
    ws = tmp_path / "ws"
    rules = _tree(ws)
    name, change, kept = CHANGES[case]
    _in_window(monkeypatch, (lambda: change(ws)) if meanwhile else None)
    went, tally = _remove(ws, name, rules)
    assert not _aside(ws)
    if not meanwhile:  # the control: the deletion lands
        listed = {str(ws / name), str(ws / name) + "/"}
        assert went and not (ws / name).exists() and listed & set(tally.deleted)
        return
    assert not went and kept(ws), tally
    assert tally.conflicts == [str(ws / name)] or "protected" in " ".join(tally.failed), tally


def test_a_tree_kept_is_not_put_back_over_what_a_person_made_at_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    rules = _tree(ws)

    def remade() -> None:
        (ws / "d").mkdir()
        (ws / "d" / "person.txt").write_text("new")

    _in_window(monkeypatch, lambda: (ws / "d" / "a").write_text("a person's"), remade)
    went, tally = _remove(ws, "d", rules)
    assert not went
    assert (ws / "d" / "person.txt").read_text() == "new"  # what they made stays
    (aside,) = _aside(ws)
    assert (ws / aside / "a").read_text() == "a person's"  # and so does their edit
    assert any(f"kept as {ws / aside}" in line for line in tally.failed), tally.failed


@pytest.mark.sandboxes("bubblewrap")
@pytest.mark.parametrize("meanwhile", [True, False], ids=["changed", "control"])
def test_a_landing_keeps_a_change_made_while_it_deletes_the_tree(
    box, make_host, sandbox, monkeypatch, meanwhile
):
    """Through a host: a command removed ``d``; the person edits ``d/a`` once the landing
    has judged ``d`` and before it removes it."""
    (box.ws / "d").mkdir()
    (box.ws / "d" / "a").write_text("original")
    time.sleep(0.05)
    host = make_host(allow_all=True, config=Config(sandbox=sandbox))
    change = (lambda: (box.ws / "d" / "a").write_text("a person's")) if meanwhile else None
    _in_window(monkeypatch, change)
    result = host.run(box.py("import shutil\nshutil.rmtree('d')"))
    assert result.landed == "landed", result.stderr.text
    assert not _aside(box.ws)
    if not meanwhile:
        assert not (box.ws / "d").exists() and not result.conflicts
        return
    assert (box.ws / "d" / "a").read_text() == "a person's"
    assert result.conflicts == (str(box.ws / "d"),), result


@pytest.mark.parametrize("name", ["d", "notes"])
def test_an_older_entry_moved_in_under_the_name_meanwhile_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A person moves the entry away and an older one (a backup they restore) in under its
    name while the first judgement walks: nothing in it is newer than the command, but it
    is not what was judged (an attack review: it was deleted)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    restore = tmp_path / "ws" / "restore"
    restore.mkdir()
    (restore / "thesis.tex").write_text("a person's")
    if name == "notes":
        restore.rename(tmp_path / "ws" / "restore.d")
        restore.write_text("a person's")
    rules = _tree(ws)

    def swap() -> None:
        (ws / name).rename(ws / f"{name}.away")
        restore.rename(ws / name)

    _in_window(monkeypatch, swap)
    went, tally = _remove(ws, name, rules)
    assert not went and tally.conflicts == [str(ws / name)], tally
    kept = ws / name / "thesis.tex" if name == "d" else ws / name
    assert kept.read_text() == "a person's"
    assert not _aside(ws)


def test_a_removal_that_stops_part_way_puts_the_rest_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What could not be removed (an immutable file, a folder the host may not write) stays
    at its name, and ``failed`` says the tree was partly deleted (it stayed hidden under the
    aside name, said to be "not deleted")."""
    ws = tmp_path / "ws"
    rules = _tree(ws)
    real = clearing.remove_at

    def part(dst: int, name: str, **how: object) -> None:
        os.unlink(f"{name}/a", dir_fd=dst)
        raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY))

    monkeypatch.setattr(clearing, "remove_at", part)
    went, tally = _remove(ws, "d", rules)
    assert not went and sorted(os.listdir(ws / "d")) == ["lib"]
    assert tally.failed == [f"{ws / 'd'}: partly deleted (Directory not empty); what is left stays"]
    assert not _aside(ws)
    monkeypatch.setattr(clearing, "remove_at", real)


def test_an_entry_an_opaque_folder_cannot_remove_is_named_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    rules = _tree(ws)

    def refused(dst: int, name: str) -> str | None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(clearing, "_move_aside", refused)
    tally = Tally()
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert not clearing.empty(fd, str(ws), rules, tally)
    finally:
        os.close(fd)
    assert f"{ws / 'd'}: not deleted: Permission denied" in tally.failed, tally
    assert (ws / "d" / "a").exists() and (ws / "notes").exists()
