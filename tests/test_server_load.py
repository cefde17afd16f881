"""Load never stops the server: floods of idle connections meet back-pressure, not an exit.

A process of the user opens 1,800 connections and says nothing; eight more open 100 each.
The server was started with a low descriptor limit (256), so without a cap it would run out
of descriptors and, before, exit on the ``EMFILE`` of ``accept()``. With the flood standing,
a call that was already running ends with its result in the record, a new call gets its
answer (from the server, or in-process when the server says ``busy``), and once the flood
goes the same server serves again.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import procs
from helpers.server import FULL, STOCKADE, WAIT, Stockade, stockade_for

FLOOD = r"""
import resource, socket, sys, time
path, count = sys.argv[1], int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
for _ in range(count):
    try:
        s = socket.socket(socket.AF_UNIX)
    except OSError:  # out of descriptors itself: hold what it has
        break
    try:
        s.connect(path)
    except OSError:
        s.close()
        continue
    held.append(s)
print(len(held), flush=True)
sys.stdin.read()
"""


def _flood(path: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", FLOOD, path, str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_flood_of_idle_connections_never_stops_the_server(tmp_path: Path) -> None:
    with stockade_for(tmp_path) as sk:
        _start_limited(sk)
        pid = sk.wait_server()
        running = sk.popen("run", "--yes", "--mode", FULL, "--json", "--", "sleep", "2")
        assert procs.wait_until(lambda: _calls_running(sk) == 1, WAIT)
        floods = [_flood(sk.place.socket, 1800)] + [_flood(sk.place.socket, 100) for _ in range(8)]
        try:
            for flood in floods:
                assert flood.stdout is not None
                assert int(flood.stdout.readline()) >= 0
            during = sk.run("run", "--yes", "--mode", FULL, "--", "echo", "during")
            assert (during.returncode, during.stdout) == (0, b"during\n"), during.stderr
            out, err = running.communicate(timeout=WAIT)
            assert running.returncode == 0, err
            assert json.loads(out)["exit_code"] == 0
        finally:
            for flood in floods:
                flood.kill()
                flood.communicate()
        assert sk.server_pid() == pid and procs.alive(pid)
        after = sk.run("run", "--yes", "--mode", FULL, "--", "echo", "after")
        assert (after.returncode, after.stdout, after.stderr) == (0, b"after\n", b"")
        assert sk.server_pid() == pid
        assert "Traceback" not in sk.log()
        verified = sk.run("verify", server=False)
        assert verified.returncode == 0, verified.stdout + verified.stderr


def _start_limited(sk: Stockade, *config: str) -> None:
    """Start ``sk``'s server with a soft and hard limit of 256 descriptors."""

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    first = subprocess.run(  # the server it starts inherits the low limit
        [*STOCKADE, *config, "run", "--yes", "--mode", FULL, "--", "true"],
        env=sk.environ(),
        preexec_fn=limited,
        capture_output=True,
        timeout=WAIT,
        check=False,
    )
    assert first.returncode == 0, first.stderr


def _calls_running(sk: Stockade) -> int:
    done = sk.run("serve", "--status", "--json", server=False)
    if done.returncode != 0:
        return -1
    found: int = json.loads(done.stdout)["calls_running"]
    return found


def test_a_flood_from_a_confined_command_never_stops_the_server(tmp_path: Path) -> None:
    # 1,800 connections of a command under Landlock, against a server of 256 descriptors.
    # Landlock with unix_sockets = true: the command may open Unix sockets, and the socket's
    # path (under XDG_RUNTIME_DIR) is visible to it; without the secret it gets no further.
    config = tmp_path / "stockade.toml"
    config.write_text("[plugins.settings.landlock]\nunix_sockets = true\n")
    with stockade_for(tmp_path / "sk", runtime=True) as sk:
        sk.env["STOCKADE_DISABLE_PLUGINS"] = "bubblewrap"
        _start_limited(sk, "--config", str(config))
        pid = sk.wait_server()
        project = tmp_path / "project"  # not the test's folder: that holds the server's
        project.mkdir()
        held = project / "held"
        flood = sk.popen(
            "--config", str(config), "run", "--yes", "--sandbox", "landlock", "--json",
            "--mode", "workspace-write", "--", "/usr/bin/python3", "-c",
            FLOOD.replace("sys.stdin.read()", "held and held.pop().close(); "  # one for the file
                          f"open({str(held)!r}, 'w').write(str(len(held))); time.sleep(3)"),
            sk.place.socket, "1800",
            cwd=project,
        )  # fmt: skip
        if not procs.wait_until(lambda: held.exists() or flood.poll() is not None, WAIT):
            raise AssertionError(sk.log())
        assert held.exists(), flood.communicate()
        during = sk.run("run", "--yes", "--mode", FULL, "--", "echo", "during")
        assert (during.returncode, during.stdout) == (0, b"during\n"), during.stderr
        out, err = flood.communicate(timeout=WAIT)
        assert flood.returncode == 0, err
        result = json.loads(out)
        assert (result["exit_code"], result["sandbox"]["provider"]) == (0, "landlock")
        connected = int(held.read_text())
        after = sk.run("run", "--yes", "--mode", FULL, "--", "echo", "after")
        assert (after.returncode, after.stdout, after.stderr) == (0, b"after\n", b"")
        assert sk.server_pid() == pid and procs.alive(pid)
        verified = sk.run("verify", server=False)
        assert verified.returncode == 0, verified.stdout + verified.stderr
    if connected == 0:  # nothing flooded: the sandbox kept the command away from the socket
        pytest.skip("the confined command could not reach the server's socket here")
