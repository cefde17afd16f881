"""Through the warm server, a command of the default profile reports the files it changed
(a kept watch per folder, :mod:`stockade.run.kept`); in-process it does not (no watch).

Real ``stockade`` clients run real commands that create, modify and delete files; the
result's ``changes`` (``--json``) and the recorded result (``stockade replay``) are compared
with what a per-call :class:`~stockade.run.changes.Watch` reports for the same command on an
identical folder.
"""

from __future__ import annotations

import http.client
import json
import re
import select
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import procs
from helpers.server import FULL, WAIT, Stockade, stockade_for
from stockade.run.changes import Watch

RUN = ("run", "--json", "--yes", "--mode", FULL, "--")
COMMAND = (
    "sh",
    "-c",
    "echo new > new.txt; mkdir -p d/e; echo more >> keep.txt; rm old.txt; rm -r gone",
)


@pytest.fixture
def sk(tmp_path: Path) -> Iterator[Stockade]:
    with stockade_for(tmp_path) as found:
        yield found


def folder(where: Path) -> Path:
    """A small project folder: files and directories the command changes, and others."""
    where.mkdir(parents=True)
    for name in ("keep.txt", "old.txt", "untouched.txt", "gone/a", "gone/b/c", "src/m.py"):
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        (where / name).write_text(name)
    return where


def changes_of(done: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["changes"] is not None, "no changes list"
    found: dict[str, Any] = result["changes"]
    return found


def per_call(where: Path, argv: tuple[str, ...]) -> dict[str, Any]:
    """What a per-call watch reports for ``argv`` run in ``where`` (no Stockade between)."""
    watch = Watch(str(where))
    subprocess.run(argv, cwd=where, check=True)
    changes = watch.finish()
    return {
        "created": list(changes.created),
        "modified": list(changes.modified),
        "deleted": list(changes.deleted),
        "total": changes.total,
        "truncated": changes.truncated,
        "method": changes.method,
        "withheld": list(changes.withheld),  # a layer's (none in a direct run)
        "conflicts": list(changes.conflicts),
    }


def test_the_default_profile_reports_what_it_changed(sk: Stockade, tmp_path: Path) -> None:
    work, control = folder(tmp_path / "work"), folder(tmp_path / "control")
    sk.run(*RUN, "true", cwd=work)  # the first call starts the server (and the watch)
    done = sk.run(*RUN, *COMMAND, cwd=work)
    mine = changes_of(done)
    assert mine == per_call(control, COMMAND)
    assert mine["created"] == ["d/", "d/e/", "new.txt"]
    assert mine["modified"] == ["keep.txt"]
    assert mine["deleted"] == ["gone/", "gone/a", "gone/b/", "gone/b/c", "old.txt"]
    assert mine["method"] == "inotify"
    recorded = sk.result(sk.steps()[-1]["run_id"])  # the record says the same
    assert recorded["action_id"] == json.loads(done.stdout)["action_id"]
    assert recorded["changes"] == mine


def test_the_run_page_shows_them(sk: Stockade, tmp_path: Path) -> None:
    work = folder(tmp_path / "work")
    sk.run(*RUN, "true", cwd=work)
    assert changes_of(sk.run(*RUN, *COMMAND, cwd=work))["total"] == 9
    run = sk.steps()[-1]["run_id"]
    ui = sk.popen("ui", "--port", "0", "--no-open")  # in-process; loopback only
    try:
        assert ui.stdout is not None
        ready, _, _ = select.select([ui.stdout], [], [], WAIT)
        assert ready, "stockade ui printed nothing"
        found = re.search(rb"http://127\.0\.0\.1:(\d+)/\?token=([\w-]+)", ui.stdout.readline())
        assert found is not None
        port, token = int(found.group(1)), found.group(2).decode()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
        try:
            connection.request(
                "GET",
                f"/runs/{run}",
                headers={"Host": f"127.0.0.1:{port}", "Cookie": f"stockade-ui-{port}={token}"},
            )
            response = connection.getresponse()
            page = response.read().decode()
        finally:
            connection.close()
        assert response.status == 200, page
    finally:
        ui.terminate()
        ui.communicate(timeout=WAIT)  # and closes its pipes
    assert "changed files (9)" in page
    assert '<li class="created">+ <code>new.txt</code></li>' in page
    assert '<li class="modified">~ <code>keep.txt</code></li>' in page
    assert '<li class="deleted">\u2212 <code>old.txt</code></li>' in page


@pytest.mark.parametrize("sandbox", ["bubblewrap", "landlock", None])
def test_in_a_sandbox_and_never_through_a_symlink_out(
    sk: Stockade, tmp_path: Path, sandbox: str | None
) -> None:
    """Under each backend the list is the same; a write through a planted symlink is refused
    by the sandbox and never listed. The control (``None``: danger-full-access) lets that
    write land outside, and still lists only the folder's own entries."""
    work, outside = folder(tmp_path / "work"), tmp_path / "outside"
    outside.mkdir()
    (work / "out").symlink_to(outside)
    how = ("--sandbox", sandbox) if sandbox else ("--mode", FULL)
    env = {"STOCKADE_DISABLE_PLUGINS": ""}  # the real sandboxes
    argv = ("run", "--json", "--yes", *how, "--", "touch", "new.txt", "keep.txt", "out/escaped")
    sk.run(*argv[:-4], "true", env=env, cwd=work)  # the server and the watch, first
    done = sk.run(*argv, env=env, cwd=work)
    result = json.loads(done.stdout)
    assert result["sandbox"]["provider"] == (sandbox or "none"), result["sandbox"]
    listed = result["changes"]
    assert (listed["created"], listed["modified"], listed["deleted"]) == (
        ["new.txt"],
        ["keep.txt"],
        [],
    )
    assert (outside / "escaped").exists() == (sandbox is None)
    assert result["exit_code"] == (0 if sandbox is None else 1)


def test_in_process_there_is_no_watch(sk: Stockade, tmp_path: Path) -> None:
    work = folder(tmp_path / "work")
    done = sk.run(*RUN, *COMMAND, cwd=work, server=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["changes"] is None


def test_each_call_gets_its_own_changes_not_what_came_between(sk: Stockade, tmp_path: Path) -> None:
    work = folder(tmp_path / "work")
    assert changes_of(sk.run(*RUN, "touch", "first", cwd=work))["created"] == ["first"]
    (work / "by-someone-else").write_text("between two calls")  # not the next call's
    (work / "src" / "m.py").write_text("edited between two calls")
    second = changes_of(sk.run(*RUN, "sh", "-c", "echo x >> first; rm src/m.py", cwd=work))
    assert (second["created"], second["modified"], second["deleted"]) == (
        [],
        ["first"],
        ["src/m.py"],
    )
    shutil.rmtree(work / "src")  # between calls again: a whole directory
    third = changes_of(sk.run(*RUN, "sh", "-c", "mkdir src; echo y > src/n.py", cwd=work))
    assert (third["created"], third["modified"], third["deleted"]) == (
        ["src/", "src/n.py"],
        [],
        [],
    )
    assert changes_of(sk.run(*RUN, "true", cwd=work))["total"] == 0
    code, status = _status(sk)
    assert code == 0
    assert status["watched"] == [str(work.resolve())]


def test_two_commands_at_once_in_one_folder(sk: Stockade, tmp_path: Path) -> None:
    """The first has the kept watch, the second a per-call one; each list holds what its
    command did, and may hold what the other did meanwhile (documented)."""
    work = folder(tmp_path / "work")
    sk.run(*RUN, "true", cwd=work)
    waits = "touch one; i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"
    first = sk.popen(*RUN, "sh", "-c", waits, cwd=work)
    assert procs.wait_until((work / "one").exists, WAIT)
    second = sk.run(*RUN, "sh", "-c", "touch two go", cwd=work)
    out, err = first.communicate(timeout=WAIT)
    one = changes_of(subprocess.CompletedProcess(first.args, first.returncode, out, err))
    two = changes_of(second)
    assert set(two["created"]) == {"two", "go"}  # it started after "one" was made
    assert {"one", "two", "go"} == set(one["created"])  # its own, and the other's meanwhile


def test_a_folder_too_large_reports_no_list(sk: Stockade, tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.mkdir()
    for i in range(101):  # 101 folders of 1,000 entries: past the 100,000 bound
        sub = big / f"d{i}"
        sub.mkdir()
        for j in range(1000):
            (sub / f"f{j}").touch()
    done = sk.run(*RUN, "touch", "x", cwd=big)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["changes"] is None
    assert _status(sk)[1]["watched"] == []


def _status(sk: Stockade) -> tuple[int, dict[str, Any]]:
    done = sk.run("serve", "--status", "--json", server=False)
    return done.returncode, json.loads(done.stdout)
