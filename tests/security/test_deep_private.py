"""Private data the host cannot name by a path is hidden all the same (an attack review's
finding). A hard link to a private file, a file the sidecar marks, or a ``*.pem`` a profile
keeps private, lying deeper than ``PATH_MAX`` (20 folders of 250 letters), was skipped as
"no path names it": a step walks down to it one folder at a time and read the data, with no
``private`` taint for the breaker to see. What lies that deep is now hidden with the
deepest folder above it that a path can name. And a folder the host may not list (a
command made it ``000``: the host, not root, cannot look in, the command can give itself the
right back) is hidden whole, its content unknown (where the protected paths' survey, which
refuses such a folder in a writable root, has not refused the step already). Each with its
control: the same read
outside the sandbox gets the canary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_breaker import config, taints

from stockade.conformance.ground import PYTHON
from stockade.errors import SandboxUnavailable

NAME = "n" * 250
LEVELS = 20  # 20 x 251 bytes: past PATH_MAX

READ_DEEP = f"""
import os, sys
os.chdir(sys.argv[1])
for _ in range({LEVELS}):
    os.chdir({NAME!r})
print("READ:", open(sys.argv[2]).read().strip())
"""

MAKE_DEEP = f"""
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
for _ in range({LEVELS}):
    try:
        os.mkdir({NAME!r}, dir_fd=fd)
    except FileExistsError:
        pass
    inner = os.open({NAME!r}, os.O_RDONLY, dir_fd=fd); os.close(fd); fd = inner
if sys.argv[3] == "link":
    os.link(sys.argv[2], "hard", dst_dir_fd=fd)
elif sys.argv[3] == "copy":
    out = os.open("hard", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
    os.write(out, open(sys.argv[2], "rb").read()); os.close(out)
print("made")
"""


def _private(box) -> Path:
    (box.ws / "private").mkdir()
    notes = box.ws / "private" / "notes.txt"
    notes.write_text(box.canary + "\n")
    return notes


def _deep(top: Path) -> int:
    """``LEVELS`` folders under ``top``, made by descriptors; the bottom one's, open."""
    top.mkdir(exist_ok=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(LEVELS):
        os.mkdir(NAME, dir_fd=fd)
        inner = os.open(NAME, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    return fd


def _read(host, box, top: str, name: str):
    request = box.request([PYTHON, "-S", "-c", READ_DEEP, top, name], profile="a", preapproved=True)
    return host.run(request)


def _outside(box, top: str, name: str) -> str:
    """The control: the same read, outside any sandbox, gets the data."""
    done = subprocess.run(
        [PYTHON, "-S", "-c", READ_DEEP, top, name],
        cwd=box.ws,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout


def test_a_hard_link_deeper_than_a_path_is_hidden(make_host, box):
    notes = _private(box)
    fd = _deep(box.ws / "deep")
    os.link(notes, "hard", dst_dir_fd=fd)
    os.close(fd)
    host = make_host(config=config(box, 9))
    result = _read(host, box, "deep", "hard")
    assert box.canary not in result.stdout.text and result.exit_code != 0
    assert not [t for t in taints(host) if t[0] == "private"]  # it read nothing private
    assert box.canary in _outside(box, "deep", "hard")


def test_a_private_glob_match_deeper_than_a_path_is_hidden(make_host, box):
    fd = _deep(box.ws / "deep")
    out = os.open("key.pem", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd)
    os.write(out, (box.canary + "\n").encode())
    os.close(out)
    os.close(fd)
    host = make_host(config=config(box, 9, private=("*.pem",)))
    result = _read(host, box, "deep", "key.pem")
    assert box.canary not in result.stdout.text and result.exit_code != 0
    assert box.canary in _outside(box, "deep", "key.pem")


@pytest.mark.sandboxes("bubblewrap")  # (Landlock's supervisor makes nothing that deep)
@pytest.mark.parametrize("how", ["link", "copy"])
def test_a_granted_run_cannot_leave_private_data_too_deep_for_the_next(make_host, box, how):
    """An ungranted run makes the tree (it lands), a granted one puts the data at its bottom
    (a hard link, or a copy its run's sidecar marks), a third, ungranted, walks down to it."""
    _private(box)
    (box.ws / "out").mkdir()
    tree = make_host(config=config(box, 9)).run(
        box.request(
            [PYTHON, "-S", "-c", MAKE_DEEP, "out", "-", "tree"], profile="a", preapproved=True
        )
    )
    assert tree.exit_code == 0 and tree.landed == "landed", tree.stderr.text
    maker = make_host(config=config(box, 9))
    made = maker.run(
        box.request(
            [PYTHON, "-S", "-c", MAKE_DEEP, "out", "private/notes.txt", how],
            profile="a",
            preapproved=True,
            read_private=True,
        )
    )
    assert made.exit_code == 0 and made.landed == "landed", made.stderr.text
    later = make_host(config=config(box, 9))
    result = _read(later, box, "out", "hard")
    assert box.canary not in result.stdout.text and result.exit_code != 0
    assert box.canary in _outside(box, "out", "hard")


def test_a_folder_the_host_may_not_list_is_hidden_whole(make_host, box):
    """A hard link to a private file in a folder made ``000``: a host that is not root
    cannot look in (as root it can, and finds the link); the command gives itself the right
    back and reads, unless the folder is hidden."""
    notes = _private(box)
    locked = box.ws / "locked"
    locked.mkdir()
    os.link(notes, locked / "hard")
    locked.chmod(0)
    try:
        host = make_host(config=config(box, 9))
        script = "import os; os.chmod('locked', 0o700); print(open('locked/hard').read())"
        request = box.request([PYTHON, "-S", "-c", script], profile="a", preapproved=True)
        try:
            result = host.run(request)
        except SandboxUnavailable as error:  # not root: the protected survey refuses it too
            assert "locked" in error.message
        else:
            assert box.canary not in result.stdout.text and result.exit_code != 0
        locked.chmod(0)
        control = subprocess.run(
            [PYTHON, "-S", "-c", script], cwd=box.ws, capture_output=True, text=True, check=False
        )
        assert box.canary in control.stdout
    finally:
        locked.chmod(0o700)
