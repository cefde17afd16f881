"""Attacks by enumeration: every entry of each list the core publishes, every kind of write.

Where a promise covers a list (:data:`~stockade.confine.system_secrets.SYSTEM_SECRETS`, the
protected names :data:`~stockade.confine.protected.AGENT_CONFIG`,
:data:`~stockade.request.literals.DOTFILES` and :data:`~stockade.confine.protected.RUN_LATER`,
the scratch folders :data:`~stockade.confine.scratch.SCRATCH_DIRS` and each home's
:data:`~stockade.confine.scratch.HOME_SCRATCH`), each entry is attacked, not a sample; a
provider that copies a list short fails here. Each attack is one sandboxed command that
tries every entry, with its control beside it.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import secrets
from pathlib import Path

import pytest

from stockade.confine import protected, scratch, system_secrets
from stockade.confine.promises import Promise
from stockade.request.literals import DOTFILES

ROOT = os.geteuid() == 0

# Reads each path of argv[1:] plainly and through /proc/self/root: what came back.
READ = """
import json, sys
out = {}
for path in sys.argv[1:]:
    got = []
    for name in (path, "/proc/self/root" + path):
        try:
            with open(name, "rb") as f:
                got.append(f.read().decode("latin-1"))
        except OSError as error:
            got.append(f"refused {error.errno}")
    out[path] = got
print(json.dumps(out))
"""


def _read(host, box, mode, paths):
    result = host.run(box.py(READ, *map(str, paths), mode=mode))
    assert result.exit_code == 0, result.stderr.text
    return json.loads(result.stdout.text)


class _Planted(contextlib.ExitStack):
    """Files planted for one attack (and the folders made for them), removed after."""

    def plant(self, path: Path, text: str) -> Path:
        made = [p for p in reversed(path.parents) if not p.exists()]
        for folder in made:
            folder.mkdir(mode=0o755)
        path.write_text(text)
        self.callback(_remove, path, made)
        return path


def _remove(path: Path, made: list[Path]) -> None:
    path.unlink(missing_ok=True)
    for folder in reversed(made):
        with contextlib.suppress(OSError):
            folder.rmdir()


def _secret_canary(pattern: str, tag: str) -> Path | None:
    """Where to plant a canary that ``pattern`` covers: a name its glob matches, a file in
    its folder, or the path itself when it does not exist; ``None`` for an existing file
    (read as it is)."""
    if any(c in pattern for c in "*?["):
        return Path(pattern.replace("*", f"stockade-kit-{tag}"))
    path = Path(pattern)
    if path.is_dir():
        return path / f"stockade-kit-{tag}"
    return None if path.exists() else path


def _matches(path: str) -> bool:
    return any(
        fnmatch.fnmatch(path, p) or protected.inside(path, [p])
        for p in system_secrets.SYSTEM_SECRETS
    )


@pytest.mark.promise(Promise.SYSTEM_SECRETS)
def test_every_system_secret_is_masked(host, box, mode):
    """Each entry of ``SYSTEM_SECRETS``: the provider says it masks what exists of it here,
    and (as root) a canary planted for each, or the real file, reads as nothing."""
    homes = protected.homes(box.request(["true"]).env, os.environ)
    in_force = system_secrets.system_secrets(homes)
    for path in in_force:
        hidden = box.hides(path, mode=mode)
        assert hidden is not None and hidden.kind == "system-secret", (path, hidden)
    if not ROOT:
        return  # the files are unreadable to this user anyway; the masks are checked above
    tag = secrets.token_hex(4)
    with _Planted() as planted:
        canaries: dict[str, str] = {}
        controls: dict[str, str] = {}
        for pattern in system_secrets.SYSTEM_SECRETS:
            where = _secret_canary(pattern, tag)
            if where is None:  # an existing file: its own content is the canary
                real = Path(pattern)
                canaries[pattern] = real.read_text(encoding="latin-1")
                continue
            if protected.inside(str(where), ["/root"]) and "/root" not in in_force:
                continue  # root's home is in use: its stores are masked instead
            planted.plant(where, f"{box.canary} {pattern}\n")
            canaries[str(where)] = f"{box.canary} {pattern}\n"
            control = where.parent / f"stockade-kit-control-{tag}"
            if not _matches(str(control)) and str(control) not in controls:
                planted.plant(control, "CONTROL\n")
                controls[str(control)] = "CONTROL\n"
        out = _read(host, box, mode, [*canaries, *controls])
    for path, text in controls.items():  # the neighbours stay readable
        assert out[path] == [text, text], (path, out[path])
    leaked = {p: out[p] for p, text in canaries.items() if text and text in out[p]}
    assert not leaked, f"system secrets read: {sorted(leaked)}"


MANGLE = """
import json, os, sys
out = {}
for rel in json.loads(sys.argv[1]):
    tries = {}
    for how, act in (
        ("write", lambda: open(rel, "w").write("PLANTED")),
        ("append", lambda: open(rel, "a").write("PLANTED")),
        ("truncate", lambda: os.truncate(rel, 0)),
        ("rename", lambda: os.rename(rel, rel + ".kit-moved")),
        ("replace", lambda: open(rel, "w").write("PLANTED")),
        ("unlink", lambda: os.unlink(rel)),
    ):
        try:
            act()
            tries[how] = "done"
        except OSError as error:
            tries[how] = f"refused {error.errno}"
    out[rel] = tries
open("plain/notes", "w").write("control")
print(json.dumps(out))
"""


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_every_protected_name_that_exists_keeps_its_content(host, box):
    """Each agent and editor config name, each dotfile and each run-later path, existing
    in the workspace and in a folder of it, is written, appended, truncated, renamed away,
    replaced and removed; after the run each holds what it held (kept or put back)."""
    names = sorted({*protected.AGENT_CONFIG, *DOTFILES, *protected.RUN_LATER})
    rels = [*names, *(f"deep/{n}" for n in names)]
    originals = {}
    for rel in rels:
        path = box.ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        originals[rel] = f"original {rel}\n"
        path.write_text(originals[rel])
    # (a folder of its own: a Landlock root holding a masked store, ``.ssh`` here, takes no
    # new entry beside it)
    (box.ws / "plain").mkdir()
    result = host.run(box.py(MANGLE, json.dumps(rels)))
    assert result.exit_code == 0, result.stderr.text
    assert (box.ws / "plain" / "notes").read_text() == "control"  # the control: it writes
    changed = []
    for rel, text in originals.items():
        path = box.ws / rel
        try:
            now = path.read_text()
        except OSError as error:
            now = f"unreadable: {error.strerror}"
        if now != text:
            changed.append(f"{rel}: {now[:40]!r}")
    assert not changed, f"protected names changed by the run: {changed}"


@pytest.mark.promise(Promise.PROTECTED_READ_ONLY)
def test_every_protected_name_that_exists_is_read_only_while_it_runs(host, box):
    """The same names and the same six ways, judged inside the run: each is refused while the
    command runs (a layer or a put-back keeping the content after it is not enough here)."""
    names = sorted({*protected.AGENT_CONFIG, *DOTFILES, *protected.RUN_LATER})
    rels = [*names, *(f"deep/{n}" for n in names)]
    for rel in rels:
        path = box.ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"original {rel}\n")
    (box.ws / "plain").mkdir()
    result = host.run(box.py(MANGLE, json.dumps(rels)))
    assert result.exit_code == 0, result.stderr.text
    tries = json.loads(result.stdout.text)
    assert set(tries) == set(rels)  # the control: every name was tried
    done = sorted(f"{rel}: {how}" for rel, ways in tries.items() for how, r in ways.items()
                  if r == "done")  # fmt: skip
    assert not done, f"protected names writable while the command ran: {done}"


@pytest.mark.promise(Promise.PRIVATE_SCRATCH)
def test_every_scratch_folder_is_the_runs_own(host, box, mode):
    """A canary in each of the host's scratch folders this user can write, and in the
    ``.cache`` of each home in use (the command's and the user's own): none reads."""
    tag = secrets.token_hex(4)
    homes = [str(box.home), os.path.expanduser("~")]
    folders = [d for d in scratch.SCRATCH_DIRS if os.path.isdir(d) and os.access(d, os.W_OK)]
    folders += [os.path.join(h, n) for h in homes for n in scratch.HOME_SCRATCH]
    with _Planted() as planted:
        canaries = [
            str(planted.plant(Path(f) / f"stockade-kit-{tag}", box.canary))
            for f in dict.fromkeys(os.path.realpath(f) for f in folders)
        ]
        out = _read(host, box, mode, [*canaries, box.secret])
    assert out[str(box.secret)][0] == box.canary  # the control: a plain file outside reads
    leaked = [p for p in canaries if box.canary in "".join(out[p])]
    assert not leaked, f"the host's scratch read: {leaked}"


# Every kind of change to a file and a folder outside the writable roots, and the same
# kinds in the run's scratch (the control: they work there).
CHANGE = """
import json, os, sys
def kinds(folder, target):
    return (
        ("write", lambda: open(target, "w").write("PLANTED")),
        ("append", lambda: open(target, "a").write("PLANTED")),
        ("open-rw", lambda: os.close(os.open(target, os.O_RDWR))),
        ("truncate", lambda: os.truncate(target, 0)),
        ("ftruncate", lambda: os.ftruncate(os.open(target, os.O_RDONLY), 0)),
        ("create", lambda: open(os.path.join(folder, "kit-new"), "x").write("x")),
        ("mkdir", lambda: os.mkdir(os.path.join(folder, "kit-dir"))),
        ("rmdir", lambda: os.rmdir(os.path.join(folder, "kit-empty"))),
        ("symlink", lambda: os.symlink(target, os.path.join(folder, "kit-sym"))),
        ("link", lambda: os.link(target, os.path.join(folder, "kit-link"))),
        ("fifo", lambda: os.mkfifo(os.path.join(folder, "kit-fifo"))),
        ("rename", lambda: os.rename(target, os.path.join(folder, "kit-renamed"))),
        ("unlink", lambda: os.unlink(os.path.join(folder, "kit-victim"))),
    )
out = {}
for label, folder in (("outside", sys.argv[1]), ("scratch", os.environ.get("TMPDIR") or "/tmp")):
    if label == "scratch":
        os.mkdir(os.path.join(folder, "kit-empty"))
        open(os.path.join(folder, "target"), "w").write("x")
        open(os.path.join(folder, "kit-victim"), "w").write("x")
    for how, act in kinds(folder, os.path.join(folder, "target")):
        try:
            act()
            out[f"{label} {how}"] = "done"
        except OSError as error:
            out[f"{label} {how}"] = f"refused {error.errno}"
print(json.dumps(out))
"""


@pytest.mark.promise(Promise.WRITES_CONFINED)
def test_every_kind_of_write_outside_is_refused(host, box, mode):
    folder = box.outside / "kinds"
    folder.mkdir()
    (folder / "target").write_text(box.canary)
    (folder / "kit-victim").write_text(box.canary)
    (folder / "kit-empty").mkdir()
    before = sorted(os.listdir(folder))
    result = host.run(box.py(CHANGE, str(folder), mode=mode))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    done = sorted(k for k, v in out.items() if k.startswith("outside") and v == "done")
    assert not done, f"writes outside the writable roots: {done}"
    ran = {k: v for k, v in out.items() if k.startswith("scratch")}
    assert all(v == "done" for k, v in ran.items() if "ftruncate" not in k), ran  # the control
    assert sorted(os.listdir(folder)) == before
    assert (folder / "target").read_text() == box.canary
    assert (folder / "kit-victim").read_text() == box.canary
