"""Interrupts through the warm server: Ctrl-C at the client, the client killed, the server
killed. In each, the command's whole process group dies (a grandchild ``sleep`` that wrote
its pid is checked gone), and the record says what happened.

The command is ``sh`` that starts ``sleep`` in the background and waits: the grandchild is
what a kill of the shell alone would leave behind. Each test first sees it running (its pid
file written, the process alive) so that "gone" afterwards means it was killed.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import procs
from helpers.server import FULL, WAIT, Stockade, stockade_for


@pytest.fixture
def sk(tmp_path: Path, escapees: list[int]) -> Iterator[Stockade]:
    with stockade_for(tmp_path) as found:
        yield found


def start_sleeper(sk: Stockade, tmp_path: Path, escapees: list[int]) -> tuple[Any, int]:
    """A client whose command's grandchild ``sleep`` runs; the client and the sleep's pid."""
    pidfile = tmp_path / "sleep.pid"
    client = sk.popen(
        "run", "--yes", "--mode", FULL, "--", "sh", "-c", f"sleep 987 & echo $! > {pidfile}; wait"
    )
    try:
        sleeper = procs.read_pid(pidfile, WAIT)
    except AssertionError:
        client.kill()
        _out, err = client.communicate()
        raise AssertionError(f"the command never started: {err!r}; log:\n{sk.log()}") from None
    escapees.append(sleeper)
    assert procs.alive(sleeper)
    return client, sleeper


def wait_recorded(sk: Stockade) -> dict[str, Any]:
    """The one step once the record has its result."""
    found: list[dict[str, Any]] = []

    def recorded() -> bool:
        found[:] = sk.steps()
        return bool(found) and found[-1]["state"] != "unfinished"

    assert procs.wait_until(recorded, WAIT, 0.1), found
    [step] = found
    return step


def test_ctrl_c_at_the_client_kills_the_group_and_exits_130(
    sk: Stockade, tmp_path: Path, escapees: list[int]
) -> None:
    client, sleeper = start_sleeper(sk, tmp_path, escapees)
    server = sk.server_pid()
    assert server is not None
    os.kill(client.pid, signal.SIGINT)
    _out, err = client.communicate(timeout=WAIT)
    assert client.returncode == 130, err
    assert procs.wait_dead(sleeper, WAIT), "the grandchild outlived the Ctrl-C"
    step = wait_recorded(sk)
    assert step["state"] == "ran"
    assert sk.result(step["run_id"])["aborted"] is True
    assert procs.alive(server)  # one call's interrupt is not the server's


def test_the_client_killed_kills_the_command_and_the_record_says_aborted(
    sk: Stockade, tmp_path: Path, escapees: list[int]
) -> None:
    client, sleeper = start_sleeper(sk, tmp_path, escapees)
    client.kill()
    client.communicate(timeout=WAIT)
    assert procs.wait_dead(sleeper, WAIT), "the grandchild outlived its client"
    step = wait_recorded(sk)
    assert sk.result(step["run_id"])["aborted"] is True
    # the server goes on serving
    again = sk.run("run", "--yes", "--mode", FULL, "--", "echo", "after")
    assert (again.returncode, again.stdout) == (0, b"after\n"), again.stderr


def test_the_server_killed_kills_its_commands_and_loses_no_record(
    sk: Stockade, tmp_path: Path, escapees: list[int]
) -> None:
    done = sk.run("run", "--yes", "--mode", FULL, "--", "echo", "acknowledged")
    assert (done.returncode, done.stdout) == (0, b"acknowledged\n"), done.stderr
    client, sleeper = start_sleeper(sk, tmp_path, escapees)
    server = sk.server_pid()
    assert server is not None
    escapees.append(server)
    os.kill(server, signal.SIGKILL)
    assert procs.wait_dead(server, WAIT)
    _out, err = client.communicate(timeout=WAIT)
    assert client.returncode == 125
    assert b"error[server_lost]" in err
    assert procs.wait_dead(sleeper, WAIT), "the grandchild outlived the server"
    verified = sk.run("verify", server=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    steps = sk.steps()
    assert steps[0]["argv"] == ["echo", "acknowledged"]
    assert steps[0]["state"] == "ran"
    # the next client starts a new server, which serves it
    after = sk.run("run", "--yes", "--mode", FULL, "--", "echo", "after")
    assert (after.returncode, after.stdout, after.stderr) == (0, b"after\n", b"")
    replacement = sk.server_pid()
    assert replacement is not None
    assert replacement != server
    assert procs.alive(replacement)


def test_stopping_the_server_mid_command_kills_it_and_records_it(
    sk: Stockade, tmp_path: Path, escapees: list[int]
) -> None:
    client, sleeper = start_sleeper(sk, tmp_path, escapees)
    server = sk.server_pid()
    assert server is not None
    stopped = sk.run("serve", "--stop", server=False)
    assert (stopped.returncode, stopped.stdout) == (0, b"stockade serve: stopped\n")
    _, err = client.communicate(timeout=WAIT)
    assert client.returncode == 130  # its command was killed ...
    assert b"stockade: the server was stopped" in err  # ... and its client says why
    assert procs.wait_dead(sleeper, WAIT), "the grandchild outlived the server's stop"
    assert procs.wait_dead(server, WAIT)
    [step] = sk.steps()
    # The server waits for the calls it interrupted: their results are recorded, aborted.
    assert step["state"] == "ran", step
    assert sk.result(step["run_id"])["aborted"] is True
    verified = sk.run("verify", server=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr
