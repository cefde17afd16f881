"""A network command reaches the network through the egress proxy only: it cannot listen.

A command classed ``network`` (the one kind that gets inet sockets) binds a TCP port on
every address, listens, and waits for a connection; the kit connects to that port from the
host and sends a canary. A provider keeps the promise when the bind is refused (Landlock's
``bind`` right) or the port is not the host's (a network namespace of the run's own). The
control: the same script run on the host takes the connection and prints the canary.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable

import pytest

from stockade.confine.promises import Promise
from stockade.conformance import procs
from stockade.conformance.ground import PYTHON

from .test_egress import Fetcher, config_for

# Binds, says where (or why not) on its first line of output (a layered run's files are not
# seen while it runs), takes one connection and prints what it sent.
LISTEN = """
import os, socket, sys
where = sys.argv[1]
def say(text):
    print(text, flush=True)
try:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("0.0.0.0", 0))
    server.listen(1)
except OSError as error:
    say(f"refused {error.errno}")
    raise SystemExit(0)
say(str(server.getsockname()[1]))
server.settimeout(0.1)
for _ in range(150):  # until a connection, the kit's word to stop, or 15 s
    if os.path.exists(where + ".stop"):
        print("nothing")
        break
    try:
        conn, _ = server.accept()
    except socket.timeout:
        continue
    conn.settimeout(5)
    print("took", conn.recv(200).decode())
    break
"""


def _knock(said_so_far: Callable[[], str], canary: str) -> str:
    """Wait for the listener's word; connect to its port on the host and send ``canary``."""
    assert procs.wait_until(lambda: "\n" in said_so_far(), timeout=60), "it said nothing"
    said = said_so_far().split("\n", 1)[0]
    if said.startswith("refused"):
        return said
    time.sleep(0.2)  # (its accept loop is running by now)
    try:
        with socket.create_connection(("127.0.0.1", int(said)), timeout=3) as conn:
            conn.sendall(canary.encode())
        return "connected"
    except OSError as error:
        return f"unreachable {error.errno}"


@pytest.mark.promise(Promise.EGRESS_PROXY)
def test_a_network_command_cannot_listen_on_a_host_port(box, make_host):
    # (the profile's one host is never reached: the command only listens)
    host = make_host(config=config_for(box, 9), plugins=[Fetcher()])
    script = box.ws / "listen.py"
    script.write_text(LISTEN)
    where = box.ws / "port"
    request = box.request([PYTHON, "-S", str(script), str(where)], profile="net")
    task = host.start(request, owner="kit")
    seen: list[str] = []

    def said_so_far() -> str:
        seen.append(host.read_output(task.task_id, owner="kit").stdout)
        return "".join(seen)

    knocked = _knock(said_so_far, box.canary)
    host.kill(task.task_id, owner="kit")  # (the loop also ends by itself after 15 s)
    deadline = time.monotonic() + 30
    while host.tasks.list("kit")[0].status == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    info = host.tasks.list("kit")[0]
    assert info.result is not None, host.read_output(task.task_id, owner="kit")
    assert info.result.classification.kind == "network"  # it had inet sockets to try with
    assert box.canary not in info.result.stdout.text, info.result.stdout.text
    assert knocked != "connected", "the host reached a port the command listened on"


def test_on_the_host_the_same_listener_takes_the_connection(tmp_path):
    """The control: unconfined, the listener is reached and prints what it was sent."""
    script = tmp_path / "listen.py"
    script.write_text(LISTEN)
    where = tmp_path / "port"
    canary = "CANARY-listen-control"
    with subprocess.Popen(
        [PYTHON, "-S", str(script), str(where)], stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None
        first = child.stdout.readline()
        assert _knock(lambda: first, canary) == "connected"
        out, _ = child.communicate(timeout=30)
    assert out == f"took {canary}\n"
