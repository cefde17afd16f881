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

from helpers import procs
from helpers.server import FULL, STOCKADE, WAIT, Stockade, stockade_for

FLOOD = r"""
import resource, socket, sys, time
path, count = sys.argv[1], int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX)
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
    low = (256, 256)
    with stockade_for(tmp_path) as sk:

        def limited() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, low)

        first = subprocess.run(  # the server it starts inherits the low limit
            [*STOCKADE, "run", "--yes", "--mode", FULL, "--", "true"],
            env=sk.environ(),
            preexec_fn=limited,
            capture_output=True,
            timeout=WAIT,
            check=False,
        )
        assert first.returncode == 0, first.stderr
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


def _calls_running(sk: Stockade) -> int:
    done = sk.run("serve", "--status", "--json", server=False)
    if done.returncode != 0:
        return -1
    found: int = json.loads(done.stdout)["calls_running"]
    return found
