"""``protected-never-visible``: while a command runs, a process of the person's own that looks
at the workspace (an editor's git integration, every few seconds) never sees a protected name
the command planted, before or after the host's checks.

The attack plants, then sleeps: a new nested repository with a hook (by hand, and by ``git
init``), ``.claude/settings.json``, ``.vscode/tasks.json``, ``.idea`` (a folder renamed into
the name), and a ``core.fsmonitor`` program in the existing ``.git/config``. A
thread of the host polls every 20 ms for each of them while the command runs and once after.
The control: the same thread sees a file the test itself drops into the workspace mid-run, so
an observer that sees nothing is an observer that would have seen.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from stockade.confine.promises import Promise

PLANT = """
import os, sys, time
for d in ('nested/.git/hooks', 'nested/.git/objects', 'nested/.git/refs', '.claude', '.vscode'):
    os.makedirs(d, exist_ok=True)
open('nested/.git/HEAD', 'w').write('ref: refs/heads/main\\n')
open('nested/.git/hooks/pre-commit', 'w').write('#!/bin/sh\\necho PWNED\\n')
open('.claude/settings.json', 'w').write('{"hooks": {"Stop": "echo PWNED"}}')
open('.vscode/tasks.json', 'w').write('{"tasks": [{"command": "echo PWNED"}]}')
try:
    open('.git/config', 'a').write('[core]\\n\\tfsmonitor = echo PWNED\\n')
except OSError as error:
    print('config refused:', error)
# Other programs and other spellings: git itself, and a folder renamed into a protected name.
import subprocess
subprocess.run(['git', 'init', '-q', 'viagit'], check=True)
open('viagit/.git/hooks/post-checkout', 'w').write('#!/bin/sh\\necho PWNED\\n')
os.makedirs('staged')
open('staged/workspace.xml', 'w').write('PWNED')
os.rename('staged', '.idea')
print('PLANTED', flush=True)
time.sleep(float(sys.argv[1]))
"""
PLANTED = (
    "nested/.git",
    ".claude/settings.json",
    ".vscode/tasks.json",
    "viagit/.git",
    ".idea/workspace.xml",
)
POLL = 0.02


class Observer(threading.Thread):
    """Polls a workspace for the planted names every 20 ms, as a host process."""

    def __init__(self, ws: Path) -> None:
        super().__init__(name="observer", daemon=True)
        self.ws = ws
        self.seen: set[str] = set()
        self.looks = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(POLL):
            self.look()

    def look(self) -> None:
        self.looks += 1
        for name in (*PLANTED, "control.txt"):
            if os.path.lexists(self.ws / name):
                self.seen.add(name)
        try:
            if "PWNED" in (self.ws / ".git" / "config").read_text():
                self.seen.add(".git/config")
        except OSError:
            pass


def _repository(ws: Path) -> None:
    """An existing repository at the workspace's root (its ``.git/config`` the target)."""
    git = ws / ".git"
    for folder in ("objects", "refs", "hooks"):
        (git / folder).mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "config").write_text("[core]\n\trepositoryformatversion = 0\n")


@pytest.mark.promise(Promise.PROTECTED_NEVER_VISIBLE)
def test_a_planted_protected_name_is_never_visible_from_outside(box, make_host):
    _repository(box.ws)
    host = make_host(allow_all=True)
    observer = Observer(box.ws)
    observer.start()
    control = threading.Timer(0.6, (box.ws / "control.txt").write_text, ("host",))
    control.start()
    try:
        result = host.run(box.py(PLANT, "1.5"))
    finally:
        control.cancel()
        observer.done.set()
        observer.join()
    observer.look()  # and once after the host's checks
    assert "PLANTED" in result.stdout.text, result.stderr.text
    assert "control.txt" in observer.seen, "the observer saw nothing at all: it is broken"
    assert observer.looks > 20
    assert observer.seen == {"control.txt"}, f"seen from outside: {sorted(observer.seen)}"
