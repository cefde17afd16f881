"""The warm server serves only its user, and never a sandboxed command (issue 24 item 4).

A live server (``stockade.server``, started detached as the thin client starts it) is given a
state directory under the box's home and, in turn, a private 0700 ``XDG_RUNTIME_DIR`` or
none (then its socket sits in the state directory). The planted canary is a file that a
command run *by the server* creates: ``stockade run -- touch CANARY`` in a folder outside
the workspace, sent as a ``call`` frame. One attack script does everything an agent could:
it reads the secret, the pid file and the log; connects by the socket's path, through
``/proc/<server pid>/root`` and ``/cwd``, to every path and ``@`` name ``/proc/net/unix``
lists and to abstract names; presents every secret it found and one replayed from an
earlier server. Its control is itself, run outside the sandbox as the test: it finds the
socket and the secret and gets the canary made. Inside a ``workspace-write`` command and a
``network`` command allowed ``socket(AF_UNIX)``, under bubblewrap and Landlock, it gets
nothing run, and each attempt fails for the reason the design gives.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stockade.config.schema import Config, NetworkConfig, PluginsConfig
from stockade.request.spec import Profile
from stockade.server import protocol
from stockade.server.paths import Place

from .conftest import PYTHON, Box
from .test_sockets import Networked

CANARY = "CANARY"
WAIT = 60.0  # seconds: a generous cap on a server's start and stop, never a timing assert

ATTACK = r"""
import errno, json, os, socket, struct, sys
arg = sys.argv[1]
cfg = json.loads(arg) if arg.startswith("{") else json.load(open(arg))
out = {"uid": os.getuid(), "reads": {}, "targets": {}, "listed": [], "fds": []}

def why(error):
    return errno.errorcode.get(error.errno, str(error))

def send(sock, message):
    body = json.dumps(message).encode()
    sock.sendall(struct.pack("!I", len(body)) + body)

def exactly(sock, size):
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data

def receive(sock):
    head = exactly(sock, 4)
    body = head and exactly(sock, struct.unpack("!I", head)[0])
    return None if body is None else json.loads(body)

# The server's secret, pid file and log, and an earlier server's secret left in the
# workspace: whatever is readable is a weapon.
tokens = {"guess": "0" * 64}
for label, path in sorted(cfg["files"].items()):
    try:
        data = open(path, "rb").read()
        out["reads"][label] = "read"
        if label in ("token", "replay"):
            tokens[label] = data.decode().strip()
    except OSError as error:
        out["reads"][label] = why(error)
for label, path in sorted(cfg["folders"].items()):
    try:
        os.listdir(path)
        out["reads"][label] = "read"
    except OSError as error:
        out["reads"][label] = why(error)

def attempt(address):
    # Per secret: "ran" (the server ran the canary command) or its refusal; else the
    # call that failed before any secret could be presented.
    seen = {}
    for label, token in sorted(tokens.items()):
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as error:
            return "socket " + why(error)
        with sock:
            sock.settimeout(30)
            try:
                sock.connect(address)
            except OSError as error:
                return "connect " + why(error)
            try:
                hello = {"type": "hello", "version": cfg["version"], "token": token}
                try:
                    send(sock, dict(hello, op="call"))
                except OSError:
                    pass  # a server that refuses the uid at once: its refusal is still there
                answer = receive(sock)
                if answer is None or answer.get("type") != "welcome":
                    seen[label] = "refused: " + str(answer and answer.get("message"))
                    continue
                call = {"type": "call", "argv": cfg["argv"], "cwd": cfg["cwd"], "tty": False}
                send(sock, dict(call, env=cfg["env"]))
                frame = receive(sock)
                while frame is not None and frame.get("type") not in ("exit", "refused"):
                    frame = receive(sock)
                seen[label] = "ran" if frame and frame.get("status") == 0 else repr(frame)
            except OSError as error:
                seen[label] = "io " + why(error)
    return seen

# Every path and @name /proc/net/unix lists inside the test's box, and the test's decoy.
try:
    lines = open("/proc/net/unix").read().splitlines()[1:]
    out["reads"]["/proc/net/unix"] = "read"
except OSError as error:
    lines = []
    out["reads"]["/proc/net/unix"] = why(error)
listed = sorted({line.split()[7] for line in lines if len(line.split()) > 7})
out["listed"] = [name for name in listed if any(s in name for s in cfg["scope"])]
targets = {name: name for name in cfg["paths"]}
for name in out["listed"]:
    targets.setdefault(name, "\0" + name[1:] if name.startswith("@") else name)
for name in cfg["abstract"]:
    targets.setdefault("@" + name, "\0" + name)
for name, address in sorted(targets.items()):
    out["targets"][name] = attempt(address)

# Sockets this process was handed: a server's listener or a client's connection.
for fd in sorted(os.listdir("/proc/self/fd")):
    try:
        link = os.readlink("/proc/self/fd/" + fd)
    except OSError:
        continue
    if link.startswith("socket:"):
        out["fds"].append(fd + " " + link)
print(json.dumps(out))
"""


class Served:
    """A live server for one state directory, started as the thin client starts it
    (detached, in a session of its own, in ``/``, its output to its log)."""

    def __init__(self, environ: dict[str, str]) -> None:
        self.place = Place(environ)
        self.place.make()
        log = os.open(self.place.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "stockade.server"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=environ,
                cwd="/",
                start_new_session=True,
            )
        finally:
            os.close(log)
        self.pid = self.proc.pid
        deadline = time.monotonic() + WAIT
        while not self._listening():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                text = Path(self.place.log).read_text(errors="replace")
                raise AssertionError(f"the server did not start; its log:\n{text}")
            time.sleep(0.05)
        self.token = Path(self.place.token).read_text().strip()

    def _listening(self) -> bool:
        try:
            token = Path(self.place.token).read_text()
            return hello(self.place.socket, token, op="status")["type"] == "welcome"
        except OSError:
            return False

    def stop(self) -> None:
        """Stop it (SIGTERM: it removes its socket and secret) and reap it."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def hello(address: str, token: str, *, op: str = "call") -> dict[str, object]:
    """The server's answer to a ``hello`` with ``token`` on a fresh connection."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(WAIT)
        sock.connect(address)
        message = {"type": "hello", "version": protocol.VERSION, "token": token, "op": op}
        protocol.send(sock, message)
        answer = protocol.receive(sock)
    assert answer is not None, "the server hung up at hello"
    return answer


class Relay:
    """An abstract socket the test listens on that relays to the server: what a server
    reachable by an abstract name would be, so the abstract-name attack can see a breach."""

    def __init__(self, name: str, target: str) -> None:
        self.name = name
        self.target = target
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind("\0" + name)
        self.listener.listen(16)
        self.accepted = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            self.accepted += 1
            threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        with conn, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as upstream:
            upstream.connect(self.target)
            back = threading.Thread(target=_pump, args=(upstream, conn), daemon=True)
            back.start()
            _pump(conn, upstream)
            back.join(WAIT)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self._thread.join(WAIT)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


class Ground:
    """A box with a state directory in its home, live servers, and the attack's inputs.

    Args:
        box: the attack suite's box (canaries under the home, never under ``/tmp``).
        runtime: whether ``XDG_RUNTIME_DIR`` is set (to a private 0700 folder in the box);
            if not, the socket sits in the state directory.
    """

    def __init__(self, box: Box, runtime: bool, monkeypatch: pytest.MonkeyPatch) -> None:
        self.box = box
        self.runtime = runtime
        state = box.home / ".local" / "state"
        state.mkdir(parents=True)
        # The test's own hosts hide the same state directory as the server's do.
        monkeypatch.setenv("XDG_STATE_HOME", str(state))
        environ = {**os.environ, "XDG_STATE_HOME": str(state), "STOCKADE_SERVER_IDLE": "300"}
        environ.pop("XDG_RUNTIME_DIR", None)
        if runtime:
            run = box.root / "run"
            run.mkdir(mode=0o700)
            environ["XDG_RUNTIME_DIR"] = str(run)
        self.environ = environ
        self.target = box.outside / "served"
        self.target.mkdir()
        self.canary = self.target / CANARY
        self.servers: list[Served] = []
        self.relays: list[Relay] = []
        self.relay_control = 0  # connections the unconfined control made to the relay

    def start(self) -> Served:
        served = Served(self.environ)
        self.servers.append(served)
        return served

    def relay(self, served: Served) -> Relay:
        made = Relay(f"stockade-{self.box.canary}", served.place.socket)
        self.relays.append(made)
        return made

    def close(self) -> None:
        for relay in self.relays:
            relay.close()
        for served in self.servers:
            served.stop()

    def inputs(self, served: Served, replay: str, relay: Relay | None) -> dict[str, object]:
        """The attack's arguments. ``replay``: an earlier server's secret, which the test
        read outside and leaves in the workspace."""
        ws = self.box.ws
        (ws / "old-token").write_text(replay)
        place, pid = served.place, served.pid
        paths = [
            place.socket,
            f"/proc/{pid}/root{place.socket}",
            f"/proc/{pid}/cwd/{os.path.relpath(place.socket, os.readlink(f'/proc/{pid}/cwd'))}",
            f"/proc/{pid}/fd/{listener(pid, place.socket)}",
        ]
        names = ["stockade", "stockade/socket", place.socket, os.path.basename(place.folder)]
        files = {"token": place.token, "pid": place.pid, "log": place.log}
        return {
            "files": {**files, "replay": str(ws / "old-token"), "environ": f"/proc/{pid}/environ"},
            "folders": {"socket folder": place.folder},
            "paths": paths,
            "abstract": [*names, relay.name] if relay else names,
            "scope": [str(self.box.root), relay.name] if relay else [str(self.box.root)],
            "version": protocol.VERSION,
            "argv": ["run", "--", "touch", CANARY],
            "cwd": str(self.target),
            "env": {"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin"},
        }

    def argv(self, inputs: dict[str, object]) -> list[str]:
        """The attack as a command: its script and arguments in files in the workspace."""
        (self.box.ws / "attack.py").write_text(ATTACK)
        (self.box.ws / "inputs.json").write_text(json.dumps(inputs))
        return [PYTHON, "-S", str(self.box.ws / "attack.py"), str(self.box.ws / "inputs.json")]

    def prepared(self, *, relay: bool = True) -> tuple[Served, dict[str, object]]:
        """A server whose predecessor's secret the attack holds, and the attack's inputs
        (with ``relay``, an abstract name relaying to the server is among them)."""
        old = self.start()
        replay = old.token
        old.stop()
        served = self.start()
        assert served.token != replay, "each server makes a secret of its own"
        return served, self.inputs(served, replay, self.relay(served) if relay else None)


def listener(pid: int, path: str) -> str:
    """The descriptor number of the socket ``pid`` listens on at ``path``: the listening one
    (``__SO_ACCEPTCON`` in its flags), never an accepted connection listed under the same
    path, whose number goes with it (the attack's ``connect`` then met ``ENOENT``)."""
    lines = [line.split() for line in Path("/proc/net/unix").read_text().splitlines()[1:]]
    # A path too long for sockaddr_un is bound through /proc/self/fd/N/socket (its folder)
    bound = (path, "/proc/self/fd/")
    listening = (f for f in lines if int(f[3], 16) & 0x10000 and f[7:] and f[7].startswith(bound))
    inodes = {f"socket:[{f[6]}]" for f in listening}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return fd
    raise AssertionError(f"{pid} does not listen on {path}")


@pytest.fixture(params=[True, False], ids=["xdg-runtime", "no-xdg-runtime"])
def ground(request, box, monkeypatch) -> Iterator[Ground]:
    yield from grounded(box, request.param, monkeypatch)


def grounded(box: Box, runtime: bool, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ground]:
    """A :class:`Ground` whose servers are stopped after the test."""
    made = Ground(box, runtime, monkeypatch)
    try:
        yield made
    finally:
        made.close()


def unconfined(ground: Ground, inputs: dict[str, object]) -> dict[str, Any]:
    """The control: the attack run as the test itself, outside any sandbox, breaks in by
    every way the server can be reached (and the canary appears); it is removed after."""
    proc = subprocess.run(ground.argv(inputs), capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    place = Place(ground.environ)
    assert set(out["reads"].values()) == {"read"}, out["reads"]
    paths = inputs["paths"]
    assert isinstance(paths, list) and paths[0] == place.socket
    relayed = ["@" + relay.name for relay in ground.relays[-1:]]
    for way in (*paths[:3], *relayed):
        assert out["targets"][way]["token"] == "ran", (way, out["targets"][way])
        assert out["targets"][way]["replay"] == "refused: the secret does not match this server's"
    assert place.socket in out["listed"], "the control: /proc/net/unix lists the socket"
    assert ground.canary.exists(), "the control: the server ran the canary command"
    ground.canary.unlink()
    if ground.relays:
        ground.relay_control = ground.relays[-1].accepted
        assert ground.relay_control > 0, "the control: it reached the abstract name"
    return out


SECRET = "refused: the secret does not match this server's"
HIDDEN = {"bubblewrap": "ENOENT", "landlock": "EACCES"}
"""How a read of the hidden state folder fails: bwrap lays an empty folder over it; Landlock
grants no right there."""
PROC = {"bubblewrap": "connect ENOENT", "landlock": "connect EACCES"}
"""``/proc/<server pid>/...``: bwrap's PID namespace has no such pid; Landlock refuses a
process outside the domain (its ptrace scope: ``connect`` is the kernel's walk, never the
supervisor's)."""
ABSTRACT = {"bubblewrap": "connect ECONNREFUSED", "landlock": "connect EPERM"}
"""An abstract name the host listens on: bwrap's network namespace has its own abstract
names; Landlock's abstract-socket scope refuses one made outside the domain."""


def unix_net_config(box: Box) -> Config:
    """A ``net`` profile that names a host, and ``socket(AF_UNIX)`` allowed."""
    agent = Profile(name="net", hosts=("allowed.test:9",), ask=(), workspace=str(box.ws))
    return Config(
        sandbox=box.sandbox,
        agents={"net": agent},
        network=NetworkConfig(resolve={"allowed.test": "127.0.0.1"}),
        plugins=PluginsConfig(settings={box.sandbox: {"unix_sockets": True}}),
    )


def confined(result: Any) -> dict[str, Any]:
    """The attack's report from inside a sandbox."""
    assert result.exit_code == 0, result.stderr.text
    out: dict[str, Any] = json.loads(result.stdout.text)
    return out


def assert_hidden(out: dict[str, Any], ground: Ground) -> None:
    """The server's secret, pid file and log are out of the command's reach, and so is the
    server's process; the replayed secret (in the workspace) is not."""
    sandbox = ground.box.sandbox
    reads = out["reads"]
    assert reads["replay"] == "read", "the control: the replayed secret reached the command"
    assert reads["/proc/net/unix"] == "read"
    for name in ("token", "pid", "log"):
        assert reads[name] == HIDDEN[sandbox], (name, reads)
    # bwrap: no such pid in its namespace; Landlock: a process outside the domain.
    gone = {"bubblewrap": "ENOENT", "landlock": "EACCES"}[sandbox]
    assert reads["environ"] == gone, reads
    # The runtime folder is not hidden; the state folder is, though Landlock leaves the
    # names in a hidden folder listable (it cannot take that from the folders above).
    listable = ground.runtime or sandbox == "landlock"
    assert reads["socket folder"] == ("read" if listable else "ENOENT"), reads
    assert out["fds"] == [], "the command holds no socket of the server's"
    assert not ground.canary.exists(), "a confined command got the server to run a command"
    assert ground.relays[-1].accepted == ground.relay_control, "it reached the abstract name"


def test_a_workspace_write_command_cannot_even_open_a_unix_socket(ground, make_host, box):
    """seccomp refuses ``socket(AF_UNIX)``: no path, ``/proc`` way or abstract name is
    ever tried, and the hidden state folder keeps the secret unread."""
    _served, inputs = ground.prepared()
    free = unconfined(ground, inputs)
    host = make_host(allow_all=True, config=Config(sandbox=box.sandbox))
    out = confined(host.run(box.request(ground.argv(inputs))))
    assert_hidden(out, ground)
    assert set(out["targets"]) >= set(free["targets"]), "every way the control took was tried"
    refused = {name: why for name, why in out["targets"].items() if why != "socket EPERM"}
    assert not refused, f"socket(AF_UNIX) was not refused by seccomp: {refused}"


def test_a_network_command_with_unix_sockets_gets_nothing_run(ground, make_host, box):
    """With ``unix_sockets`` on, each way to the server fails for its own reason: the
    socket in the hidden state folder is not there (bwrap) or is reached and refused for
    the secret (Landlock does not govern connecting to a pathname socket); the socket in
    the runtime folder is reached and refused for the secret (the replayed one too);
    ``/proc/<pid>`` is another PID namespace's or out of Landlock's scope; an abstract
    name is another network namespace's or out of Landlock's abstract-socket scope."""
    served, inputs = ground.prepared()
    unconfined(ground, inputs)
    sandbox = box.sandbox
    host = make_host(config=unix_net_config(box), plugins=[Networked()])
    out = confined(host.run(box.request(ground.argv(inputs), profile="net")))
    assert_hidden(out, ground)
    targets = out["targets"]
    place, relay = served.place, ground.relays[-1]
    if sandbox == "bubblewrap" and not ground.runtime:
        assert targets[place.socket] == "connect ENOENT", "the state folder is hidden"
    else:
        assert targets[place.socket] == {"guess": SECRET, "replay": SECRET}, targets
    paths = inputs["paths"]
    assert isinstance(paths, list)
    for way in paths[1:]:
        assert targets[way] == PROC[sandbox], (way, targets[way])
    assert targets["@" + relay.name] == ABSTRACT[sandbox], targets
    for name in inputs["abstract"][:-1]:  # type: ignore[index]
        assert targets["@" + name] == "connect ECONNREFUSED", (name, targets)
    # Landlock shares the host's socket table: it sees the socket and the name, no more.
    listed = [place.socket, "@" + relay.name] if sandbox == "landlock" else []
    assert out["listed"] == sorted(listed), out["listed"]
