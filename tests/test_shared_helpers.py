"""The public helpers a third-party provider builds on: the seccomp launcher for runners that
cannot take ``--seccomp FD``, the credential stores under homes, the scratch list.

The launcher is attacked for real: a command behind it tries ``unshare`` (refused by the
shared policy) and ``ptrace``; the same command without it is the control that shows the
attack works here. A launcher that cannot load the filter must not run the command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from stockade_bubblewrap import layout

from stockade.confine import scratch, seccomp, seccomp_exec, stores
from stockade.errors import SandboxUnavailable

UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"
PTRACE = (
    "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
    "rc = libc.ptrace(0, 0, 0, 0); print(rc, os.strerror(ctypes.get_errno()))"
)


def _run(argv, fds=()):
    return subprocess.run(
        list(argv), pass_fds=tuple(fds), capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def filter_fd():
    fd = seccomp.program_fd(network=False)
    yield fd
    os.close(fd)


def test_the_launcher_loads_the_filter_before_the_command(filter_fd):
    argv = ["unshare", "--user", "--map-root-user", "true"]
    control = _run([UNSHARE, *argv[1:]])
    assert control.returncode == 0, f"control: unshare must work here: {control.stderr}"
    done = _run(seccomp_exec.launcher(filter_fd, UNSHARE, argv), [filter_fd])
    assert done.returncode != 0
    assert "Operation not permitted" in done.stderr
    # ptrace(PTRACE_TRACEME): allowed without the filter, refused behind it.
    python = os.path.realpath(sys.executable)
    assert _run([python, "-c", PTRACE]).stdout.startswith("0 ")
    traced = _run(seccomp_exec.launcher(filter_fd, python, ["python3", "-c", PTRACE]), [filter_fd])
    assert traced.stdout.split()[0] == "-1", traced.stdout + traced.stderr
    assert "Operation not permitted" in traced.stdout


def test_the_command_gets_argv_and_not_the_descriptor(filter_fd, tmp_path):
    script = "import os, sys; print(sys.argv[1:]); print(sorted(os.listdir('/proc/self/fd')))"
    python = os.path.realpath(sys.executable)
    argv = ["my-name", "-c", script, "a b", ""]
    done = _run(seccomp_exec.launcher(filter_fd, python, argv), [filter_fd])
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first == "['a b', '']"
    assert str(filter_fd) not in eval(second)  # noqa: S307 - a list of digits we printed


def test_without_the_filter_the_command_never_runs(tmp_path):
    canary = tmp_path / "ran"
    bad = os.memfd_create("not-bpf")
    os.write(bad, b"12345")  # not a whole BPF instruction
    try:
        for fd, fds in ((bad, [bad]), (9999, [])):  # a bad program; no descriptor at all
            done = _run(seccomp_exec.launcher(fd, "/usr/bin/touch", ["touch", str(canary)]), fds)
            assert done.returncode == seccomp_exec.FAILED
            assert "the seccomp filter was not loaded" in done.stderr
            assert not canary.exists()
    finally:
        os.close(bad)
    # Control: with a real filter the same command runs.
    good = seccomp.program_fd(network=False)
    try:
        launched = seccomp_exec.launcher(good, "/usr/bin/touch", ["touch", str(canary)])
        assert _run(launched, [good]).returncode == 0
    finally:
        os.close(good)
    assert canary.exists()


def test_the_launcher_picks_an_interpreter_the_sandbox_can_see():
    argv = seccomp_exec.launcher(3, "/bin/true", ["true"], hidden=["/nonexistent"])
    assert argv[0] == os.path.realpath(sys.executable)
    assert argv[1:4] == ("-I", "-S", "-c")
    assert argv[5:] == ("3", "/bin/true", "true")
    own = os.path.dirname(os.path.realpath(sys.executable))
    base = os.path.dirname(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    if own != "/usr/bin" and base != "/usr/bin" and os.path.isfile("/usr/bin/python3"):
        fallback = seccomp_exec.launcher(3, "/bin/true", ["true"], hidden=[own, base])
        assert fallback[0] == "/usr/bin/python3"
    with pytest.raises(SandboxUnavailable, match="no Python interpreter"):
        seccomp_exec.launcher(3, "/bin/true", ["true"], hidden=["/"])


def test_stores_under_homes(tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".config" / "gh").mkdir(parents=True)
    (home / ".netrc").write_text("machine x\n")
    elsewhere = tmp_path / "aws"
    elsewhere.mkdir()
    (home / ".aws").symlink_to(elsewhere)
    (home / ".docker").symlink_to(tmp_path / "dangling")
    found = stores.stores_under([str(home), str(home)])
    assert found == [
        str(home / ".ssh"),
        str(elsewhere),  # masked where it really is
        str(home / ".netrc"),
        str(home / ".config" / "gh"),
    ]


def test_the_scratch_list_is_what_bubblewrap_replaces(tmp_path):
    assert layout.PRIVATE_DIRS == scratch.SCRATCH_DIRS
    home = tmp_path / "home"
    (home / ".cache").mkdir(parents=True)
    found = scratch.private_folders([str(home)])
    assert "/tmp" in found
    assert str(home / ".cache") not in found  # (tmp_path lies in /tmp, replaced already)
    assert all(not os.path.islink(p) for p in found)
    assert Path("/var/run").is_symlink() == ("/var/run" not in found)
    assert scratch.private_folders([str(home)], dirs=()) == [str(home / ".cache")]
    assert scratch.private_folders([str(home)], [str(home)], dirs=()) == []
