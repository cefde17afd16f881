"""The egress forwarder's program, run as the provider builds it but outside any sandbox:
it starts the command through ``stockade.run.spawn.fork_exec``, hands each connection to the
host over the control socket, keeps that socket from the command, and ends with its status."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from stockade_bubblewrap.provider import _forwarder

WAIT = 60

# The command: is the control socket (argv[1], by inode) among its descriptors? Then connect
# to the forwarder and say hello. Its exit status says what it found.
COMMAND = """
import os, socket, sys
port, inode = int(sys.argv[1]), sys.argv[2]
held = set()
for fd in os.listdir("/proc/self/fd"):
    try:
        held.add(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        pass  # the descriptor listdir itself used, closed since
with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
    conn.sendall(b"hello")
sys.exit(9 if f"socket:[{inode}]" in held else 7)
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_the_forwarder_starts_the_command_and_hands_its_connections_over():
    source = _forwarder()
    assert source.count("from __future__ import annotations") == 1
    host_end, inside = socket.socketpair()
    inside.set_inheritable(True)
    host_end.settimeout(WAIT)
    port = _free_port()
    inode = str(os.fstat(inside.fileno()).st_ino)
    # PROGRAM, then the command's argv from its argv[0], as the provider passes them.
    command = [sys.executable, "python3", "-I", "-S", "-c", COMMAND, str(port), inode]
    forwarder = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", source, str(port), str(inside.fileno()), *command],
        pass_fds=[inside.fileno()],
        stderr=subprocess.PIPE,
    )
    inside.close()
    try:
        data, fds, _, _ = socket.recv_fds(host_end, 1, 1)
        assert data == b"c", forwarder.communicate(timeout=WAIT)[1].decode()
        with socket.socket(fileno=fds[0]) as handed:
            handed.settimeout(WAIT)
            assert handed.recv(5) == b"hello"
        _, stderr = forwarder.communicate(timeout=WAIT)
    finally:
        forwarder.kill()
        forwarder.wait(timeout=WAIT)
        host_end.close()
    # 7: the command ran, connected, and did not hold the control socket; 9: it leaked.
    assert forwarder.returncode == 7, stderr.decode()


BURST = """
import socket, sys
for _ in range(int(sys.argv[2])):
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=60).close()
"""  # then it ends at once: the last connections are still queued on the listener


def test_connections_a_command_makes_as_it_ends_all_reach_the_host():
    """A command that connects and exits at once: every connection it made is handed over
    before the forwarder ends. A second thread accepting them lost the last ones when the
    command ended first (the host read an empty control socket: seen once in CI, under
    load; on an idle machine that thread mostly wins, so this guards more than it shows)."""
    for count in (1, 5, 20):
        host_end, inside = socket.socketpair()
        inside.set_inheritable(True)
        host_end.settimeout(WAIT)
        port = _free_port()
        command = [sys.executable, "python3", "-I", "-S", "-c", BURST, str(port), str(count)]
        forwarder = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _forwarder(), str(port), str(inside.fileno()),
             *command],
            pass_fds=[inside.fileno()],
        )  # fmt: skip
        inside.close()
        handed = 0
        try:
            while True:
                data, fds, _, _ = socket.recv_fds(host_end, 1, 1)
                if not data:
                    break  # the forwarder ended: its end of the control socket closed
                handed += 1
                for fd in fds:
                    os.close(fd)
            assert forwarder.wait(timeout=WAIT) == 0
        finally:
            forwarder.kill()
            host_end.close()
        assert handed == count
