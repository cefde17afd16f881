"""The ``stockade`` command line as a user runs it, through the warm server: real client
processes, a private state folder (so a private server), and the server stopped afterwards.

Each :class:`Stockade` has its own ``XDG_STATE_HOME``, so its clients start and reach a
server of their own that no other test shares; ``XDG_RUNTIME_DIR`` is unset (the socket
is then in the state folder) or a private 0700 folder. :func:`stockade_for` stops that
server at teardown (``stockade serve --stop``, then SIGKILL if it is still there), so no test
leaves one running.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from helpers import procs
from stockade.server import protocol
from stockade.server.paths import Place
from stockade.testing import CLI

STOCKADE = [*CLI]
"""The native client when the session runs the command line through the server (and one is
installed), else the Python client; a :class:`Stockade` may be given either."""
FULL = "danger-full-access"
WAIT = 60.0
"""Seconds any wait for an event may take before the test fails (never a timing assert)."""


class Stockade:
    """A private state folder and the CLI's processes against it.

    Args:
        root: a fresh folder of the test's.
        runtime: give the clients a private ``XDG_RUNTIME_DIR`` (the socket goes there);
            otherwise it is unset and the socket is in the state folder.
    """

    def __init__(
        self, root: Path, *, runtime: bool = False, client: Sequence[str] = STOCKADE
    ) -> None:
        self.root = root
        self.client = list(client)
        """The argv that starts the command line (the native or the Python client)."""
        self.state = root / "state"
        self.state.mkdir(parents=True)
        env = {
            **os.environ,
            "XDG_STATE_HOME": str(self.state),
            "XDG_CONFIG_HOME": "/nonexistent",
            "STOCKADE_DISABLE_PLUGINS": "bubblewrap,landlock",
            # a server a failed teardown missed still goes away on its own
            "STOCKADE_SERVER_IDLE": "120",
        }
        for name in ("STOCKADE_NO_SERVER", "STOCKADE_CONFIG", "XDG_RUNTIME_DIR"):
            env.pop(name, None)
        if runtime:
            folder = root / "runtime"
            folder.mkdir(mode=0o700)
            env["XDG_RUNTIME_DIR"] = str(folder)
        self.env = env
        self.clients: list[subprocess.Popen[bytes]] = []

    @property
    def place(self) -> Place:
        """Where this state folder's server lives."""
        return Place(self.env)

    def environ(self, *, server: bool = True, env: dict[str, str] | None = None) -> dict[str, str]:
        """The clients' environment: through the server, or in-process."""
        found = {**self.env, **(env or {})}
        if not server:
            found["STOCKADE_NO_SERVER"] = "1"
        return found

    def run(
        self,
        *args: str,
        server: bool = True,
        env: dict[str, str] | None = None,
        input: bytes | None = None,
        cwd: str | Path | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[bytes]:
        """``stockade ARGS`` to its end: bytes out, bytes err, status."""
        return subprocess.run(
            [*self.client, *args],
            env=self.environ(server=server, env=env),
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            cwd=cwd or self.root,
            timeout=timeout,
            check=False,
        )

    def popen(
        self, *args: str, env: dict[str, str] | None = None, **kwargs: Any
    ) -> subprocess.Popen[bytes]:
        """``stockade ARGS`` started through the server; the caller waits for it."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("cwd", self.root)
        client = subprocess.Popen([*self.client, *args], env=self.environ(env=env), **kwargs)
        self.clients.append(client)
        return client

    def server_pid(self) -> int | None:
        """The running server's pid (from its pid file), or ``None``."""
        try:
            return int(Path(self.place.pid).read_text())
        except (OSError, ValueError):
            return None

    def wait_server(self) -> int:
        """The pid of the server once it listens."""
        assert procs.wait_until(
            lambda: self.server_pid() is not None and os.path.exists(self.place.socket), WAIT
        ), f"no server listened; its log:\n{self.log()}"
        pid = self.server_pid()
        assert pid is not None
        return pid

    def log(self) -> str:
        """The server's log so far."""
        try:
            return Path(self.place.log).read_text(errors="replace")
        except OSError as error:
            return f"(no log: {error})"

    def steps(self) -> list[dict[str, Any]]:
        """``stockade log --json``: the record's steps, oldest first."""
        done = self.run("log", "--json", server=False)
        assert done.returncode == 0, done.stderr
        steps: list[dict[str, Any]] = json.loads(done.stdout)
        return steps

    def token(self) -> str:
        """The running server's secret."""
        return Path(self.place.token).read_text().strip()

    def connect(self) -> socket.socket:
        """A raw connection to the running server (nothing said yet)."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(WAIT)
        conn.connect(self.place.socket)
        return conn

    def hello(self, op: str = "call") -> socket.socket:
        """A raw connection past the hello (with the secret), welcomed."""
        conn = self.connect()
        protocol.send(
            conn, {"type": "hello", "version": protocol.VERSION, "token": self.token(), "op": op}
        )
        reply = protocol.receive(conn)
        assert reply is not None and reply["type"] == "welcome", reply
        return conn

    def result(self, run_id: str) -> dict[str, Any]:
        """The recorded result of the run's one step (``stockade replay --json``)."""
        done = self.run("replay", "--json", run_id, server=False)
        assert done.returncode == 0, done.stderr
        results = [e["event"]["result"] for e in json.loads(done.stdout) if e["kind"] == "result"]
        assert len(results) == 1, results
        found: dict[str, Any] = results[0]
        return found

    def stop(self) -> None:
        """Stop this state folder's server, whatever it is doing; wait until it is gone.
        Clients still running are killed first: one could otherwise start a server after."""
        for client in self.clients:
            if client.poll() is None:
                client.kill()
                client.wait()
        pid = self.server_pid()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.run("serve", "--stop", server=False, timeout=WAIT)
        if pid is not None and not procs.wait_dead(pid, WAIT):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            procs.wait_dead(pid, WAIT)


@contextlib.contextmanager
def stockade_for(
    root: Path, *, runtime: bool = False, client: Sequence[str] = STOCKADE
) -> Iterator[Stockade]:
    """A :class:`Stockade` whose server is stopped when the block ends."""
    found = Stockade(root, runtime=runtime, client=client)
    try:
        yield found
    finally:
        found.stop()


def frames(conn: socket.socket) -> list[dict[str, object]]:
    """Every frame the server sends until it closes the connection (or a frame is bad)."""
    found: list[dict[str, object]] = []
    while True:
        try:
            message = protocol.receive(conn)
        except (protocol.ProtocolError, OSError):
            return found
        if message is None:
            return found
        found.append(message)
