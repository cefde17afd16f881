"""A program or path the sandbox hides gives a clear, structured error, on both backends.

A program (or the interpreter its ``#!`` line names) in a folder the sandbox hides is
refused before it starts: ``SpawnFailed``, naming the hidden path, the folder and the fix.
After a failed run, an argument naming a hidden path is listed in the facts (``hidden``,
``denied``) and noted on stderr.

Each attack has its control: the same program where the sandbox shows it (the workspace,
a ``--grant-write`` folder, a workspace under ``/var/tmp``) runs and leaves its marker, so
a refusal means the hidden folder was seen, not that the program could not run at all.
The folders under ``/var/tmp`` and ``/dev/shm`` are made by the tests and removed after.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from stockade.confine.promises import Promise
from stockade.conformance.ground import PYTHON
from stockade.errors import SpawnFailed
from stockade.request.plan import HiddenPath
from stockade.request.spec import ExecRequest

from ..procs import open_fds

MARK = "open('ran', 'w').write('ran')"


@pytest.fixture
def var_tmp():
    """A folder of the test's own under the host's /var/tmp (private in every sandbox)."""
    folder = Path(tempfile.mkdtemp(prefix="stockade-hidden-", dir="/var/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def venv(where: Path) -> Path:
    """A virtualenv-like interpreter: ``bin/python3`` a link to the system one, and the
    ``pyvenv.cfg`` beside it that a real venv's interpreter reads at start."""
    (where / "bin").mkdir(parents=True)
    (where / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    python = where / "bin" / "python3"
    python.symlink_to(PYTHON)
    return python


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(0o755)
    return path


def refused(host, request) -> SpawnFailed:
    with pytest.raises(SpawnFailed) as caught:
        host.run(request)
    return caught.value


@pytest.mark.promise(Promise.HIDDEN_PATHS)
def test_a_venv_under_var_tmp_is_refused_before_it_starts(host, box, var_tmp):
    python = venv(var_tmp / "venv")
    error = refused(host, box.request([str(python), "-S", "-c", MARK]))
    assert error.exit_status == 126 and error.code == "spawn_failed"
    assert error.details["hidden"] == str(python)
    assert (error.details["folder"], error.details["kind"]) == ("/var/tmp", "private")
    assert str(python) in error.message and "private /var/tmp" in error.message
    assert f"--grant-write {var_tmp}" in error.hint and "outside /tmp and /var/tmp" in error.hint
    assert not (box.ws / "ran").exists()
    # Control: the same venv in the workspace runs, and leaves its mark.
    result = host.run(box.request([str(venv(box.ws / "venv")), "-S", "-c", MARK]))
    assert result.exit_code == 0, result.stderr.text
    assert (box.ws / "ran").read_text() == "ran"


@pytest.mark.promise(Promise.HIDDEN_PATHS)
def test_the_hint_s_grant_shows_the_venv(host, box, var_tmp):
    python = venv(var_tmp / "venv")
    error = refused(host, box.request([str(python), "-S", "-c", MARK]))
    grant = error.details["grant"]
    result = host.run(
        box.request([str(python), "-S", "-c", MARK], grant_writable=[grant], preapproved=True)
    )
    assert result.exit_code == 0, result.stderr.text
    assert (box.ws / "ran").read_text() == "ran"


@pytest.mark.promise(Promise.HIDDEN_PATHS)
def test_a_script_whose_interpreter_is_hidden_is_refused(host, box, var_tmp):
    hidden = venv(var_tmp / "venv")
    tool = script(box.ws / "tool.py", f"#!{hidden} -S\n{MARK}\n")
    error = refused(host, box.request([str(tool)]))
    assert error.details["interpreter"] == str(hidden) == error.details["hidden"]
    assert error.details["program"] == str(tool)
    assert f"its #! interpreter {hidden} lies in /var/tmp" in error.message
    assert not (box.ws / "ran").exists()
    # Control: the same script, its interpreter in the workspace.
    shown = venv(box.ws / "venv")
    script(box.ws / "tool.py", f"#!{shown} -S\n{MARK}\n")
    result = host.run(box.request([str(tool)]))
    assert result.exit_code == 0, result.stderr.text
    assert (box.ws / "ran").read_text() == "ran"


@pytest.mark.promise(Promise.HIDDEN_PATHS)
@pytest.mark.parametrize("where", ["home", "workspace"])
def test_a_program_in_a_masked_credential_store_is_refused(host, box, where):
    store = (box.home if where == "home" else box.ws) / ".ssh"
    # (It prints rather than writes: under Landlock a workspace holding a masked store
    # takes no new entries at its top.)
    tool = script(store / "tool", f"#!/bin/sh\necho {box.canary}\n")
    error = refused(host, box.request([str(tool)]))
    assert error.details["kind"] == "credential-store"
    assert error.details["folder"] == os.path.realpath(store)
    assert "on purpose" in error.hint
    # Control: the same program beside the workspace's files runs.
    result = host.run(box.request([str(script(box.ws / "tool", tool.read_text()))]))
    assert result.exit_code == 0, result.stderr.text
    assert result.stdout.text == f"{box.canary}\n"


@pytest.mark.promise(Promise.HIDDEN_PATHS)
def test_a_link_into_a_hidden_folder_is_refused(host, box, var_tmp):
    target = script(var_tmp / "tool", "#!/bin/sh\necho ran > ran\n")
    link = box.ws / "tool"
    link.symlink_to(target)
    error = refused(host, box.request([str(link)]))
    assert (error.details["folder"], error.details["hidden"]) == ("/var/tmp", str(link))
    assert not (box.ws / "ran").exists()
    # Control: a link to a shown program runs.
    link.unlink()
    link.symlink_to(script(box.ws / "real", "#!/bin/sh\necho ran > ran\n"))
    assert host.run(box.request([str(link)])).exit_code == 0
    assert (box.ws / "ran").exists()


@pytest.mark.promise(Promise.HIDDEN_PATHS)
def test_a_program_in_dev_shm_is_refused(host, box):
    folder = Path(tempfile.mkdtemp(prefix="stockade-hidden-", dir="/dev/shm"))
    try:
        tool = script(folder / "tool", "#!/bin/sh\necho ran > ran\n")
        error = refused(host, box.request([str(tool)]))
        assert error.details["kind"] == "private" and error.details["folder"] == "/dev"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert not (box.ws / "ran").exists()


@pytest.mark.promise(Promise.HIDDEN_PATHS)
def test_a_workspace_under_var_tmp_shows_its_programs(host, box, var_tmp):
    ws = var_tmp / "ws"
    tool = script(ws / "tool", "#!/bin/sh\necho ran > ran\n")
    request = ExecRequest(
        [str(tool)], str(ws), sandbox=box.sandbox, env={"HOME": str(box.home)}, timeout=60
    )
    result = host.run(request)
    assert result.exit_code == 0, result.stderr.text
    assert (ws / "ran").read_text() == "ran\n"
    # Its neighbour in /var/tmp, outside the workspace, stays hidden.
    other = script(var_tmp / "other" / "tool", "#!/bin/sh\necho ran > ran\n")
    error = refused(host, ExecRequest([str(other)], str(ws), sandbox=box.sandbox, timeout=60))
    assert error.details["folder"] == "/var/tmp"


@pytest.mark.promise(Promise.HIDDEN_PATHS)
def test_cp_from_var_tmp_names_the_hidden_path(host, box, var_tmp):
    source = var_tmp / "x"
    source.write_text(box.canary)
    result = host.run(box.request(["cp", str(source), "."]))
    assert result.exit_code != 0 and not (box.ws / "x").exists()
    assert result.sandbox.denied
    assert result.sandbox.hidden == (HiddenPath(str(source), "/var/tmp", "private"),)
    assert result.sandbox.hidden[0].reason == "private /var/tmp"
    # Control: the same copy from a folder the sandbox shows lands, and lists nothing.
    copied = host.run(box.request(["cp", str(box.secret), "."]))
    assert copied.exit_code == 0 and (box.ws / "secret.txt").read_text() == box.canary
    assert copied.sandbox.hidden == () and not copied.sandbox.denied


@pytest.mark.promise(Promise.HIDDEN_PATHS)
def test_an_option_naming_a_hidden_path_is_listed(host, box, var_tmp):
    source = var_tmp / "x"
    source.write_text(box.canary)
    read = "import sys; print(open(sys.argv[1].split('=', 1)[1]).read())"
    result = host.run(box.py(read, f"--input={source}"))
    assert result.exit_code != 0 and box.canary not in result.stdout.text
    assert [h.path for h in result.sandbox.hidden] == [str(source)]
    # Control: the same option naming a shown file reads it, and lists nothing.
    shown = host.run(box.py(read, f"--input={box.secret}"))
    assert shown.exit_code == 0 and box.canary in shown.stdout.text
    assert shown.sandbox.hidden == ()


@pytest.mark.promise(Promise.HIDDEN_PATHS)
def test_a_run_that_succeeds_lists_nothing(host, box, var_tmp):
    (var_tmp / "x").write_text(box.canary)
    # (Listable under both: bwrap's own, empty; Landlock's names only.)
    result = host.run(box.request(["ls", "/var/tmp"]))
    assert result.exit_code == 0 and result.sandbox.hidden == ()
    # Control: the run that fails on the same folder's file lists it.
    failed = host.run(box.request(["cat", str(var_tmp / "x")]))
    assert failed.exit_code != 0 and box.canary not in failed.stdout.text
    assert [h.path for h in failed.sandbox.hidden] == [str(var_tmp / "x")]


@pytest.mark.promise(Promise.HIDDEN_PATHS)
def test_a_refusal_releases_its_plan(host, box, var_tmp):
    tool = script(var_tmp / "tool", "#!/bin/sh\necho ran\n")
    refused(host, box.request([str(tool)]))  # warm: filters, rulesets, caches
    before = open_fds()
    for _ in range(5):
        refused(host, box.request([str(tool)]))
    assert not open_fds() - before  # other threads may close theirs meanwhile
    # Control: a run that starts after them works as ever.
    assert host.run(box.request(["true"])).exit_code == 0
