"""The starts that are not a command's plan: a probe's output and its failures, a child
started by ``fork_exec`` with only the standard library loaded, and the browser opener."""

from __future__ import annotations

import inspect
import subprocess
import sys
import webbrowser

import pytest

from stockade.run import spawn

# Generous: a loaded machine may take seconds to start an interpreter.
WAIT = 60


def test_probe_returns_the_status_and_both_outputs():
    code = "import sys; sys.stdout.write('out'); sys.stderr.write('err'); sys.exit(3)"
    done = spawn.probe([sys.executable, "-I", "-S", "-c", code], timeout=WAIT)
    assert (done.returncode, done.stdout, done.stderr) == (3, b"out", b"err")
    assert repr(done) == "Probed(3, b'out', b'err')"


def test_a_probe_that_does_not_end_is_killed_and_raises_timeout_error():
    # The sleep is far longer than the cap; nothing here measures how long the probe took.
    with pytest.raises(TimeoutError, match=r"no answer in 0\.5 s"):
        spawn.probe([sys.executable, "-I", "-S", "-c", "import time; time.sleep(600)"], timeout=0.5)


def test_a_probe_that_cannot_start_raises_os_error(tmp_path):
    with pytest.raises(OSError, match="No such file") as raised:
        spawn.probe([str(tmp_path / "missing")], timeout=WAIT)
    assert not isinstance(raised.value, TimeoutError)


def _standalone(tail: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run spawn's own source plus ``tail`` as the forwarder does: ``-I -S``, no Stockade."""
    program = f"{inspect.getsource(spawn)}\nimport sys\n{tail}"
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", program, *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )


def test_fork_exec_starts_the_program_with_its_argv_and_returns_its_pid():
    tail = (
        "pid = fork_exec(sys.executable, "
        "['child', '-I', '-S', '-c', 'import sys; print(sys.argv); sys.exit(5)', 'a b'])\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print('stockade' in sys.modules, os.waitstatus_to_exitcode(status))\n"
    )
    done = _standalone(tail)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['-c', 'a b']", "False 5"]


def test_fork_exec_of_a_missing_program_exits_127_saying_why(tmp_path):
    missing = str(tmp_path / "missing")
    tail = (
        "_, status = os.waitpid(fork_exec(sys.argv[1], ['x']), 0)\n"
        "print(os.waitstatus_to_exitcode(status))\n"
    )
    done = _standalone(tail, missing)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "127\n"
    assert done.stderr == f"stockade: cannot run {missing}: No such file or directory\n"


def test_open_browser_says_whether_a_browser_took_the_url(monkeypatch):
    opened: list[str] = []

    def took(url: str) -> bool:
        opened.append(url)
        return True

    monkeypatch.setattr(webbrowser, "open", took)
    assert spawn.open_browser("file:///tmp/x.html") is True
    assert opened == ["file:///tmp/x.html"]

    def broken(url: str) -> bool:
        raise webbrowser.Error("could not locate runnable browser")

    monkeypatch.setattr(webbrowser, "open", broken)
    assert spawn.open_browser("file:///tmp/x.html") is False
