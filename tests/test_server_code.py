"""One server per installation and code: an edit replaces the server on the next call, and
two venvs or checkouts never share one."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import stockade.server.code
from helpers import procs
from helpers.server import FULL, WAIT, Stockade, stockade_for
from stockade.server import code


@pytest.fixture
def sk(tmp_path: Path) -> Iterator[Stockade]:
    with stockade_for(tmp_path) as found:
        yield found


def test_an_edit_of_the_code_replaces_the_server_on_the_next_call(sk: Stockade) -> None:
    source = Path(stockade.server.code.__file__)
    if "site-packages" in str(source):
        pytest.skip("an installed package: its reinstall is what changes the identity")
    if not os.access(source, os.W_OK):
        pytest.skip("a checkout of another user's: not ours to edit")
    first = sk.run("run", "--yes", "--mode", FULL, "--", "echo", "one")
    assert (first.returncode, first.stdout) == (0, b"one\n"), first.stderr
    old = sk.wait_server()
    before = code.identity()
    info = source.stat()
    try:
        os.utime(source, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000))  # "an edit"
        assert code.identity() != before
        second = sk.run("run", "--yes", "--mode", FULL, "--", "echo", "two")
        assert (second.returncode, second.stdout, second.stderr) == (0, b"two\n", b"")
        new = sk.wait_server()
        assert new != old
        assert procs.wait_dead(old, WAIT)  # drained: it had no call left
    finally:
        os.utime(source, ns=(info.st_atime_ns, info.st_mtime_ns))


def test_two_installations_never_share_a_server(sk: Stockade) -> None:
    ours = sk.place
    script = "import sys; sys.prefix = sys.argv[1]\nfrom stockade.server.paths import Place\n"
    script += "import os; p = Place(os.environ); print(p.socket); print(p.token)"
    other = subprocess.run(
        [sys.executable, "-c", script, "/another/venv"],
        env=sk.environ(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert other[0] != ours.socket and other[1] != ours.token
