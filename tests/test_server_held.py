"""A step that asks, through the warm server: held when the client has no terminal, then
``pending`` / ``approve`` / ``decline``; asked at the client's own terminal when it has one.

The terminal is a real pseudo-terminal: the client's stdin and controlling terminal, so
``/dev/tty`` opens in it as at a person's shell. The question travels from the server to
that terminal, the typed answer back; the same exchange in-process shows the same question.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.server import FULL, STOCKADE, WAIT, Stockade, stockade_for

QUESTION = b"approve? [y/N] "


def _script(marker: Path) -> str:
    """A script that waits for a person: its ``rm`` part destroys (scripts are read by parts)."""
    return f"echo ran; touch {marker}; rm -f {marker}.none"


@pytest.fixture
def sk(tmp_path: Path) -> Iterator[Stockade]:
    with stockade_for(tmp_path) as found:
        yield found


def hold(sk: Stockade, marker: Path) -> dict[str, Any]:
    """Ask for a step that waits for a person, with no terminal; the held step."""
    held = sk.run("run", "--mode", FULL, "--", "sh", "-c", _script(marker))
    assert held.returncode == 126, held.stderr
    assert b"error[policy_held]" in held.stderr
    assert sk.server_pid() is not None  # the server held it, not an in-process fallback
    listed = sk.run("pending", "--json")
    assert listed.returncode == 0, listed.stderr
    [step] = json.loads(listed.stdout)
    assert step["argv"] == ["sh", "-c", _script(marker)]
    assert not marker.exists()
    return step


def test_held_then_approved_through_the_server_runs_it(sk: Stockade, tmp_path: Path) -> None:
    marker = tmp_path / "approved"
    step = hold(sk, marker)
    text = sk.run("pending")
    assert text.stdout == sk.run("pending", server=False).stdout  # the same listing
    assert step["run_id"].encode() in text.stdout
    done = sk.run("approve", step["run_id"], str(step["step"]))
    assert done.returncode == 0, done.stderr
    assert b"ran\n" in done.stdout
    assert marker.exists()
    assert json.loads(sk.run("pending", "--json").stdout) == []
    states = [s["state"] for s in sk.steps()]
    assert states == ["ran"], states


def test_held_then_declined_through_the_server_never_runs(sk: Stockade, tmp_path: Path) -> None:
    marker = tmp_path / "declined"
    step = hold(sk, marker)
    done = sk.run("decline", step["run_id"], str(step["step"]))
    assert done.returncode == 0, done.stderr
    assert json.loads(sk.run("pending", "--json").stdout) == []
    again = sk.run("approve", step["run_id"], str(step["step"]))
    assert again.returncode == 125, again.stdout
    assert not marker.exists()
    assert [s["state"] for s in sk.steps()] == ["declined"]
    verified = sk.run("verify", server=False)
    assert verified.returncode == 0, verified.stdout


# --- at the client's terminal ---------------------------------------------------------------


def _controlling_tty() -> None:  # runs in the child, after setsid: stdin becomes its terminal
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _read_until(fd: int, wanted: bytes, seen: bytearray) -> None:
    deadline = time.monotonic() + WAIT
    while wanted not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"{wanted!r} never came; the terminal showed {bytes(seen)!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the other side closed
                chunk = b""
            assert chunk, f"the terminal closed before {wanted!r}: {bytes(seen)!r}"
            seen += chunk


def at_terminal(
    sk: Stockade, answer: bytes, marker: Path, *, server: bool = True
) -> tuple[int, bytes, bytes, bytes]:
    """Run a step that asks with a pty as the client's terminal, answer it; the exit status,
    stdout, stderr and what the terminal showed up to the question."""
    master, slave = os.openpty()
    try:
        client = subprocess.Popen(
            [*STOCKADE, "run", "--mode", FULL, "--", "sh", "-c", _script(marker)],
            env=sk.environ(server=server),
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=sk.root,
            start_new_session=True,
            preexec_fn=_controlling_tty,  # noqa: PLW1509 - a test's child, no threads in it
        )
        os.close(slave)
        slave = -1
        seen = bytearray()
        try:
            _read_until(master, QUESTION, seen)
            os.write(master, answer + b"\n")
            out, err = client.communicate(timeout=WAIT)
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
        return client.returncode, out, err, bytes(seen)
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)


def test_yes_at_the_clients_terminal_runs_it(sk: Stockade, tmp_path: Path) -> None:
    marker = tmp_path / "yes"
    status, out, err, shown = at_terminal(sk, b"y", marker)
    assert (status, out) == (0, b"ran\n"), err
    assert marker.exists()
    assert sk.server_pid() is not None
    assert b"stockade: this command waits for your approval" in shown
    assert b"run:    sh -c 'echo ran; touch " in shown
    [step] = sk.steps()
    assert step["state"] == "ran"
    replay = sk.run("replay", "--json", step["run_id"], server=False)
    assert "approved at the terminal" in replay.stdout.decode()  # a person's answer, recorded


def test_no_at_the_clients_terminal_declines_it_as_in_process(sk: Stockade, tmp_path: Path) -> None:
    marker = tmp_path / "no"
    via = at_terminal(sk, b"n", marker)
    assert sk.server_pid() is not None
    local = at_terminal(sk, b"n", marker, server=False)
    assert not marker.exists()
    assert via[0] == local[0] == 126
    assert (via[1], via[2]) == (local[1], local[2])
    assert b"declined at the terminal (n)" in via[2]
    # the same question, as the person saw it (but for the run each call is)
    steps = sk.steps()
    shown = [
        q[3].replace(s["run_id"].encode(), b"RUN") for q, s in zip((via, local), steps, strict=True)
    ]
    assert shown[0] == shown[1]
    assert json.loads(sk.run("pending", "--json").stdout) == []  # refused, never held
