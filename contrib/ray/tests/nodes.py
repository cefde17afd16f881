"""A real Ray cluster on this machine, as the docs start one: ``ray start --head`` and a second
``ray start`` on another loopback address, both with Ray 2.60's token authentication.

Each ``ray start`` runs in a session of its own, so the processes of one node (its raylet,
its agents, its workers) are found by their session id and nothing of another user's or
another test run's Ray is touched. A node is lost by killing its raylet by pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

# `ray start` itself, with the one wait it cannot be told to lengthen (a raylet must register
# with the head within 30 s) made twice as long: on a machine shared by busy test runs the
# raylet often takes longer, and `ray start` then kills the node it started.
RAY_START = """
import sys, time
import ray._private.node as node

class Patient:
    def __getattr__(self, name):
        return getattr(time, name)

    def monotonic(self):
        return time.monotonic() / 2

node.time = Patient()
from ray.scripts.scripts import main
sys.argv = ["ray", *sys.argv[1:]]
sys.exit(main())
"""

# Fast node-death detection for the tests (the defaults take tens of seconds).
FAST = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "5",
}


AGENT_PORTS = (
    "--metrics-export-port",
    "--dashboard-agent-grpc-port",
    "--dashboard-agent-listen-port",
    "--runtime-env-agent-port",
)


def token_env() -> dict[str, str]:
    """Token authentication as Ray 2.60 has it on by default: one token for every node and
    the driver (``RAY_AUTH_TOKEN``), set in this process too."""
    token = os.environ.get("RAY_AUTH_TOKEN") or secrets.token_hex(16)
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, **FAST}
    os.environ.update(env)
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(args: list[str], env: dict[str, str], ip: str = "", *, tries: int = 3) -> Node:
    """A node started by ``ray start``, tried again (after its processes are killed) when it
    times out registering with the head, as it can on a loaded machine."""
    for attempt in range(tries):
        try:
            return Node(args, env, ip)
        except RuntimeError:
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


class Node:
    """One ``ray start``: its session (every process it started), its address."""

    def __init__(self, args: list[str], env: dict[str, str], ip: str = "") -> None:
        self.ip = ip
        # The agents' ports given, not chosen by the agents: a raylet otherwise waits a fixed
        # 15 s for the files naming them and dies when a slow agent writes them later
        # (ray-project/ray#65983).
        for flag in AGENT_PORTS:
            args = [*args, flag, str(_free_port())]
        started = subprocess.Popen(
            [sys.executable, "-c", RAY_START, "start", "--disable-usage-stats", *args],
            env={**os.environ, **env, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.session = started.pid
        try:
            out = self._wait(started)
        except BaseException:
            self.stop()
            raise
        # On a loaded machine a raylet can take longer to register than `ray start` waits
        # (30 s, fixed): the node is then still coming up, and is waited for by its id.
        slow = "timed out during startup" in out and bool(self.pids("raylet/raylet"))
        if started.returncode != 0 and not slow:
            self.stop()
            raise RuntimeError(f"ray start failed:\n{out[-3000:]}")
        found = re.search(r"ray start --address='([^']+)'", out)
        local = re.search(r"Local node IP: (\S+)", out)
        self.address = found.group(1) if found else ""
        self.local_ip = local.group(1) if local else ip

    def _wait(self, started: subprocess.Popen[str]) -> str:
        """``ray start``'s output once it exits; a node whose raylet died while it waited
        (ray-project/ray#65983) is given up at once, to be started again."""
        seen, deadline = False, time.monotonic() + 300
        while started.poll() is None:
            alive = bool(self.pids("raylet/raylet"))
            if (seen and not alive) or time.monotonic() > deadline:
                started.kill()
                started.communicate()
                raise RuntimeError("ray start failed: the raylet died, or it took over 300 s")
            seen = seen or alive
            time.sleep(0.5)
        out, _ = started.communicate()
        return out

    def pids(self, name: str = "") -> list[int]:
        """The live processes of this node's session (whose command line holds ``name``)."""
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[3]) == self.session and fields[0] != "Z" and name.encode() in cmdline:
                found.append(int(entry))
        return found

    def node_id(self) -> str:
        """This node's id, as the cluster (a connected driver) knows it."""
        import ray

        deadline = time.monotonic() + 180
        while True:
            alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
            found = [n for n in ray.nodes() if n["NodeManagerAddress"] == self.local_ip]
            mine = [n["NodeID"] for n in found if n["NodeID"] in alive]
            if mine or time.monotonic() > deadline:
                return str(mine[-1])
            time.sleep(0.5)

    def raylet(self) -> int:
        """The pid of this node's raylet."""
        [pid] = self.pids("raylet/raylet")
        return pid

    def kill_raylet(self) -> None:
        """Lose the node: its raylet killed at once (its workers die with it)."""
        os.kill(self.raylet(), signal.SIGKILL)

    def stop(self) -> None:
        """Every process of the node's session killed."""
        for _ in range(3):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)


class Cluster:
    """A head node (``127.0.0.1``) and side nodes (``127.0.0.2``, ...) with a ``side`` resource
    each, all in one short temp folder."""

    def __init__(self, temp: str, *, cpus: int = 1) -> None:
        self.temp = temp
        self.env = token_env()
        port = _free_port()
        self.head = start(
            ["--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
             "--num-cpus", str(cpus), "--include-dashboard", "false", "--temp-dir", temp],
            self.env,
        )  # fmt: skip
        self.address = self.head.address or f"{self.head.local_ip}:{port}"
        self.sides: list[Node] = []

    def add_side(self, name: str = "side", *, cpus: int = 1) -> Node:
        """A second node joined to the head, on its own loopback address, with a custom
        resource ``name`` (so a test can place workers on it)."""
        ip = f"127.0.0.{len(self.sides) + 2}"
        node = start(
            ["--address", self.address, "--node-ip-address", ip, "--num-cpus", str(cpus),
             "--resources", json.dumps({name: 100})],
            self.env,
            ip,
        )  # fmt: skip
        self.sides.append(node)
        return node

    def stop(self) -> None:
        for node in (*self.sides, self.head):
            node.stop()
