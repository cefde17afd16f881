"""The warm server's life: started on first use, replaced when it speaks another version,
a changed config picked up without a restart, in-process when asked or when it cannot start,
``stockade serve`` with ``--status`` / ``--stop`` / in the foreground, and idle exit that
never comes while a command is live.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import procs
from helpers.server import FULL, WAIT, Stockade, stockade_for

RUN = ("run", "--yes", "--mode", FULL, "--")


@pytest.fixture
def sk(tmp_path: Path) -> Iterator[Stockade]:
    with stockade_for(tmp_path) as found:
        yield found


def status(sk: Stockade) -> tuple[int, dict[str, object]]:
    done = sk.run("serve", "--status", "--json", server=False)
    return done.returncode, json.loads(done.stdout)


def echo(sk: Stockade, word: str, **kwargs) -> subprocess.CompletedProcess[bytes]:
    done = sk.run(*RUN, "echo", word, **kwargs)
    assert (done.returncode, done.stdout) == (0, f"{word}\n".encode()), done.stderr
    return done


# --- versions and config -------------------------------------------------------------------

OLD_SERVER = (
    "import runpy, stockade.server.protocol as p\n"
    "p.VERSION = '0.0.0-old/0'\n"
    "runpy.run_module('stockade.server', run_name='__main__')\n"
)


@pytest.fixture
def old_server(sk: Stockade) -> Iterator[subprocess.Popen[bytes]]:
    """A server of another version listening for ``sk``'s clients; killed at teardown if
    the test's clients did not replace it."""
    old = subprocess.Popen(
        [sys.executable, "-c", OLD_SERVER],
        env=sk.environ(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert sk.wait_server() == old.pid
        yield old
    finally:
        if old.poll() is None:
            old.kill()
            old.wait()


def test_a_server_of_another_version_is_replaced_transparently(
    sk: Stockade, old_server: subprocess.Popen[bytes]
) -> None:
    code, shown = status(sk)  # a client of this version is refused by it
    assert code == 1
    assert "version" in str(shown["why"])
    done = echo(sk, "replaced")
    assert done.stderr == b""  # transparently: not a word about it
    assert old_server.wait(timeout=WAIT) == 0  # it was asked to stop, and did
    new = sk.server_pid()
    assert new is not None
    assert new != old_server.pid
    code, shown = status(sk)
    assert (code, shown["pid"], shown["calls_served"]) == (0, new, 1)


OLD_CLIENT = (
    "import sys, stockade.server.protocol as p\n"
    "p.VERSION = '0.0.0-old/0'\n"
    "from stockade.cli import entry\n"
    "sys.argv[1:] = ['run', '--yes', '--mode', 'danger-full-access', '--', 'sh', '-c',"
    " 'touch started; sleep 2; echo finished']\n"
    "entry()\n"
)


def test_replacing_an_old_server_lets_its_running_commands_finish(
    sk: Stockade, old_server: subprocess.Popen[bytes]
) -> None:
    running = subprocess.Popen(
        [sys.executable, "-c", OLD_CLIENT],
        env=sk.environ(),
        cwd=sk.root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + WAIT
    while not (Path(sk.root) / "started").exists():
        assert time.monotonic() < deadline, "the old client's command never started"
        time.sleep(0.05)
    done = echo(sk, "replaced")  # this version's client replaces the old server ...
    assert done.stderr == b""
    out, err = running.communicate(timeout=WAIT)
    # ... and the old server's running command was let finish, not killed.
    assert (running.returncode, out, err) == (0, b"finished\n", b"")
    assert old_server.wait(timeout=WAIT) == 0


def test_a_changed_config_is_picked_up_without_a_restart(sk: Stockade, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[agents.default]\nask = ["reads"]\n')
    argv = ("--config", str(config), "run", "--mode", FULL, "--", "cat", str(config))
    held = sk.run(*argv)
    assert held.returncode == 126, held.stderr
    assert b"reads is in agents.default.ask" in held.stderr
    server = sk.server_pid()
    # the same size, so only its time and content say it changed
    config.write_text("[agents.default]\nask = [       ]\n")
    done = sk.run(*argv)
    assert (done.returncode, done.stdout) == (0, config.read_bytes()), done.stderr
    assert sk.server_pid() == server  # no restart
    config.write_text('[agents.default]\nask = ["reads"]\n')
    assert sk.run(*argv).returncode == 126  # and back


@pytest.mark.parametrize("how", ["--no-server", "STOCKADE_NO_SERVER=1"])
@pytest.mark.parametrize("runtime", [False, True], ids=["state", "runtime"])
def test_asked_for_in_process_no_server_starts(tmp_path: Path, how, runtime) -> None:
    with stockade_for(tmp_path, runtime=runtime) as sk:
        if how == "--no-server":
            done = sk.run("--no-server", *RUN, "echo", "here")
        else:
            done = sk.run(*RUN, "echo", "here", env={"STOCKADE_NO_SERVER": "1"})
        assert (done.returncode, done.stdout, done.stderr) == (0, b"here\n", b"")
        place = sk.place
        assert not Path(place.socket).exists()
        assert not Path(place.pid).exists()
        assert not Path(place.folder).exists()
        # the control: without it, this very folder gets a server
        echo(sk, "served")
        assert Path(place.socket).exists()
        assert sk.server_pid() is not None


def test_when_the_server_cannot_start_the_cli_runs_in_process_and_says_why(
    sk: Stockade,
) -> None:
    blocker = Path(sk.place.private)
    blocker.parent.mkdir(parents=True)
    blocker.write_text("not a folder")
    done = sk.run(*RUN, "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (done.returncode, done.stdout) == (3, b"out\n")
    first, rest = done.stderr.split(b"\n", 1)
    # (the client's check of the folders finds it before a start would)
    assert first.startswith(b"stockade: running in-process: refused the server at ")
    assert first.endswith(f"{blocker} is not a folder".encode())
    assert rest == b"err\n"  # one line, then the command's own stderr as in-process
    assert blocker.read_text() == "not a folder"


# --- stockade serve ------------------------------------------------------------------------


def test_status_and_stop(sk: Stockade) -> None:
    code, shown = status(sk)
    assert (code, shown["running"]) == (1, False)
    text = sk.run("serve", "--status", server=False)
    assert text.returncode == 1
    assert text.stdout.startswith(b"stockade serve: not running (no server is listening on ")
    echo(sk, "one")
    pid = sk.wait_server()
    code, shown = status(sk)
    assert code == 0
    assert shown["running"] is True
    assert (shown["pid"], shown["calls_served"], shown["calls_running"]) == (pid, 1, 0)
    assert shown["socket"] == sk.place.socket
    assert shown["idle_timeout"] == 120.0
    text = sk.run("serve", "--status", server=False)
    assert text.stdout.startswith(f"stockade serve: running (pid {pid}, ".encode())
    stopped = sk.run("serve", "--stop", server=False)
    assert (stopped.returncode, stopped.stdout) == (0, b"stockade serve: stopped\n")
    assert procs.wait_dead(pid, WAIT)
    for path in (sk.place.socket, sk.place.token, sk.place.pid):
        assert not Path(path).exists(), path
    again = sk.run("serve", "--stop", server=False)
    assert (again.returncode, again.stdout) == (0, b"stockade serve: none was running\n")


def test_the_socket_is_under_the_runtime_folder_when_there_is_one(tmp_path: Path) -> None:
    with stockade_for(tmp_path, runtime=True) as sk:
        echo(sk, "runtime")
        socket = Path(sk.place.socket)
        runtime = Path(sk.env["XDG_RUNTIME_DIR"])
        assert socket.is_relative_to(runtime / "stockade")
        assert socket.is_socket()
        assert (socket.parent.stat().st_mode & 0o777) == 0o700
        assert not Path(sk.place.private, "socket").exists()  # not in the state folder too
        assert status(sk)[1]["socket"] == str(socket)


def test_serve_in_the_foreground_until_sigterm(sk: Stockade) -> None:
    server = sk.popen("serve")
    assert sk.wait_server() == server.pid
    echo(sk, "foreground")
    assert status(sk)[1]["pid"] == server.pid
    server.send_signal(signal.SIGTERM)
    out, err = server.communicate(timeout=WAIT)
    assert server.returncode == 0, err
    assert f"listening on {sk.place.socket} (pid {server.pid})".encode() in out
    for path in (sk.place.socket, sk.place.token, sk.place.pid):
        assert not Path(path).exists(), path


def test_idle_exit_never_while_a_command_is_live(sk: Stockade) -> None:
    idle = {"STOCKADE_SERVER_IDLE": "1"}
    client = sk.popen(*RUN, "sh", "-c", "sleep 3; echo done", env=idle)
    pid = sk.wait_server()
    out, err = client.communicate(timeout=WAIT)
    # the server outlived its idle second three times over while the command ran: had it
    # gone, the command would have died with it and the client said so
    assert (client.returncode, out, err) == (0, b"done\n", b"")
    assert procs.wait_dead(pid, WAIT)  # then, idle, it went
    assert "stockade serve: idle, exiting" in sk.log()
    assert not os.path.exists(sk.place.socket)
    echo(sk, "again")  # the next client starts another


def test_a_server_exiting_as_a_client_connects_is_replaced(sk: Stockade) -> None:
    """A server that goes (idle) between a client's connect and its hello closes the
    connection unanswered: nothing was asked of it, so the client starts a new one rather
    than falling back in-process (where ``start`` and kept runs are refused)."""
    place = sk.place
    place.make()
    Path(place.token).write_text("dying-server-secret")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(place.socket)
    listener.listen(4)
    seen: list[bytes] = []

    def exit_at_hello() -> None:  # as an idle server does: accept, then close everything
        conn, _ = listener.accept()
        seen.append(conn.recv(65536))
        os.unlink(place.socket)
        os.unlink(place.token)
        conn.close()
        listener.close()

    dying = threading.Thread(target=exit_at_hello)
    dying.start()
    done = sk.run("start", "--yes", "--mode", FULL, "--", "true")
    dying.join(WAIT)
    assert seen and b"hello" in seen[0]  # the control: the client did reach the dying one
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().startswith("task-"), done.stderr
    assert b"in-process" not in done.stderr


def test_clients_starting_servers_at_once_all_reach_one(sk: Stockade) -> None:
    """Clients that each find no server start one each, at once: one binds, the rest find it
    listening and exit without touching its secret, and every client is served by it (before,
    a late starter rewrote the secret, so later clients were refused and ran in-process)."""
    clients = [sk.popen(*RUN, "echo", str(i)) for i in range(6)]
    results = [(c.wait(timeout=WAIT), *c.communicate()) for c in clients]
    pid = sk.wait_server()
    for i, (code, out, err) in enumerate(results):
        assert (code, out) == (0, f"{i}\n".encode()), err
        assert b"in-process" not in err, err
    code, shown = status(sk)
    assert (code, shown["pid"]) == (0, pid)
    assert shown["calls_served"] == len(clients)  # the others' calls were served by it too
    assert b"in-process" not in sk.run(*RUN, "true").stderr  # its secret is still its own
