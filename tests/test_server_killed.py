"""A process killed at any moment loses no record: every started command gets its result, or
an ``aborted`` error that says why, once the store is opened again; ``verify`` passes.

The process killed with SIGKILL is the warm server (mid-call) or an in-process command line;
hypothesis picks the moment, from before the command is admitted to after it ended. A command
that started running (it made its marker file) has its action and its allow in the record:
the host stores them together, in one transaction, before the command starts. The next
call (which starts a new server, or runs in-process) opens the store and closes the record of
what the dead process had started (:mod:`stockade.record.live`).
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import procs
from helpers.server import FULL, STOCKADE, WAIT, Stockade, stockade_for

RAN = "ran"  # the command makes it first thing: it started running
SCRIPT = f": > {RAN}; echo started; sleep 0.4; echo done"
COMMAND = ["run", "--yes", "--mode", FULL, "--", "sh", "-c", SCRIPT]


def _events(sk: Stockade) -> list[tuple[str, str, str]]:
    """The store's events in order (action id, kind, body); none before it is made."""
    store = sk.state / "stockade" / "store.db"
    if not store.exists():
        return []
    with sqlite3.connect(store) as db:
        try:
            return db.execute("SELECT action_id, kind, body FROM events ORDER BY seq").fetchall()
        except sqlite3.OperationalError:  # made, but nothing recorded yet
            return []


def unclosed(sk: Stockade) -> list[str]:
    """The actions a permission allowed that have no result, error or decline after it."""
    started: dict[str, bool] = {}
    for action_id, kind, body in _events(sk):
        if kind == "permission":
            if json.loads(body)["decision"]["verdict"] == "allow":
                started[action_id] = True
            else:
                started.pop(action_id, None)
        elif kind in ("result", "error", "decline"):
            started.pop(action_id, None)
    return sorted(started)


def kinds_of_the_command(sk: Stockade) -> list[list[str]]:
    """For each recorded action of :data:`SCRIPT`, the kinds of its events (a permission:
    ``permission:VERDICT``)."""
    ours: dict[str, list[str]] = {}
    for action_id, kind, body in _events(sk):
        fields = json.loads(body)
        if kind == "action" and fields["argv"] == ["sh", "-c", SCRIPT]:
            ours[action_id] = []
        if action_id in ours:
            verdict = f":{fields['decision']['verdict']}" if kind == "permission" else ""
            ours[action_id].append(kind + verdict)
    return list(ours.values())


def aborted(sk: Stockade) -> list[str]:
    store = sk.state / "stockade" / "store.db"
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT body FROM events WHERE kind='error'").fetchall()
    return [json.loads(b)["message"] for (b,) in rows if json.loads(b)["code"] == "aborted"]


def _kill_server_during_a_call(sk: Stockade, delay: float) -> None:
    client = sk.popen(*COMMAND)
    time.sleep(delay)
    pid = sk.server_pid()
    if pid is not None and procs.alive(pid):
        procs.kill_quietly(pid)
        procs.wait_dead(pid, WAIT)
    client.communicate(timeout=WAIT)


def _kill_in_process_cli(sk: Stockade, delay: float) -> None:
    cli = subprocess.Popen(
        [*STOCKADE, *COMMAND],
        env=sk.environ(server=False),
        cwd=sk.root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(delay)
    cli.send_signal(signal.SIGKILL)
    cli.wait()


@settings(
    max_examples=4,
    deadline=None,
    database=None,  # CI runs this as a user too, who cannot write the checkout's .hypothesis
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    who=st.sampled_from(["server", "in-process"]),
    delay=st.floats(min_value=0.0, max_value=2.0),
)
def test_a_kill_at_any_moment_loses_no_record(
    tmp_path_factory: object, who: str, delay: float
) -> None:
    root = Path(tmp_path_factory.mktemp("killed"))  # type: ignore[attr-defined]
    with stockade_for(root) as sk:
        # No server yet: an early moment kills it while it starts (or a CLI while it loads).
        if who == "server":
            _kill_server_during_a_call(sk, delay)
        else:
            _kill_in_process_cli(sk, delay)
        # the next call opens the store again (the way the killed one ran)
        after = sk.run("run", "--yes", "--mode", FULL, "--", "true", server=who == "server")
        assert after.returncode == 0, after.stderr
        assert procs.wait_until(lambda: not unclosed(sk), WAIT), unclosed(sk)
        for message in aborted(sk):
            assert "ended before its result was recorded" in message
        if (sk.root / RAN).exists():  # it started running: its action and allow were stored
            [kinds] = kinds_of_the_command(sk)
            assert kinds[:2] == ["action", "permission:allow"], kinds
            assert kinds[2] in ("result", "error"), kinds
        verified = sk.run("verify", server=False)
        assert verified.returncode == 0, verified.stdout + verified.stderr


def test_control_a_killed_server_leaves_an_unclosed_command_until_the_store_is_opened(
    tmp_path: Path,
) -> None:
    with stockade_for(tmp_path) as sk:
        client = sk.popen(*COMMAND)
        assert procs.wait_until((sk.root / RAN).exists, WAIT)  # running now
        assert unclosed(sk)  # started: allowed, no result yet
        pid = sk.wait_server()
        procs.kill_quietly(pid)
        procs.wait_dead(pid, WAIT)
        client.communicate(timeout=WAIT)
        assert len(unclosed(sk)) == 1  # what the test looks for is there to be seen
        assert kinds_of_the_command(sk) == [["action", "permission:allow"]]
        after = sk.run("run", "--yes", "--mode", FULL, "--", "true")
        assert after.returncode == 0, after.stderr
        assert procs.wait_until(lambda: not unclosed(sk), WAIT)
        [message] = aborted(sk)
        assert f"(pid {pid}) ended before its result was recorded" in message
        verified = sk.run("verify", server=False)
        assert verified.returncode == 0, verified.stdout + verified.stderr
