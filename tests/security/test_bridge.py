"""The forwarder's control socket, the host's bridge behind it, and other processes, attacked.

The attack as found: a command took the forwarder's control socket with ``pidfd_getfd``,
sent a pipe over it, and the host's bridge thread died, leaving the pipe open in the host
and every later request unanswered. Now ``pidfd_getfd`` is refused (the control: it works
unconfined), and the bridge, fed every hostile message we could think of directly, closes
what it did not expect, leaks nothing and serves the next connection. And a command may
not lower another process's limits (``RLIMIT_CPU`` 0 would kill the Stockade host).
"""

from __future__ import annotations

import array
import gc
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stockade_bubblewrap.bridge import MAX_FDS, Bridge

from .conftest import PYTHON
from .test_sockets import BODY, IPPROTO_MPTCP, Networked, has_mptcp, net_config, serve_upstream

STEAL = """
import ctypes, errno, json, os, socket, sys, urllib.request
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return rc if rc >= 0 else -ctypes.get_errno()
def name(rc):
    return "got" if rc >= 0 else errno.errorcode[-rc]
PIDFD_OPEN, PIDFD_GETFD = 434, 438
out = {}
# The control target: a child of our own, holding a pipe.
reader, writer = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(writer)
    os.read(reader, 1)
    os._exit(0)
child = call(PIDFD_OPEN, pid, 0)
out["own_child"] = name(call(PIDFD_GETFD, child, reader, 0)) if child >= 0 else name(child)
# The real target: our parent (under bubblewrap, the forwarder and its control socket).
parent = os.getppid()
pidfd = call(PIDFD_OPEN, parent, 0)
out["pidfd_open_parent"] = name(pidfd)
try:
    numbers = [int(n) for n in os.listdir(f"/proc/{parent}/fd")]
except OSError:
    numbers = list(range(64))
try:  # a link of /proc/PID/fd takes the ptrace check (listing them takes only the owner's)
    out["parent_fd_link"] = os.readlink(f"/proc/{parent}/fd/0")
except OSError as error:
    out["parent_fd_link"] = errno.errorcode[error.errno]
stolen = {}
for number in numbers:
    fd = call(PIDFD_GETFD, pidfd, number, 0) if pidfd >= 0 else pidfd
    stolen[number] = name(fd)
    if fd >= 0:  # the attack as found: a pipe sent down whatever socket we took
        try:
            socket.send_fds(socket.socket(fileno=fd), [b"c"], [reader])
            stolen[number] = "sent a pipe"
        except OSError:
            pass
out["parent"] = stolen
os.write(writer, b"x")
os.waitpid(pid, 0)
if sys.argv[1]:  # and the next allowed request is still served
    try:
        out["proxy"] = urllib.request.urlopen(sys.argv[1], timeout=30).read().decode()
    except Exception as error:
        out["proxy"] = "FAILED " + repr(error)
print(json.dumps(out))
"""


@pytest.fixture
def upstream() -> Iterator[int]:
    yield from serve_upstream()


def test_pidfd_getfd_cannot_take_the_forwarders_socket(make_host, box, upstream):
    host = make_host(config=net_config(box, upstream), plugins=[Networked()])
    script = box.ws / "steal.py"  # a file: `python -c` always waits for a person
    script.write_text(STEAL)
    url = f"http://allowed.test:{upstream}/"
    result = host.run(box.request([PYTHON, "-S", str(script), url], profile="net"))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    assert out["proxy"] == BODY, out
    assert out["own_child"] == "EPERM", out
    assert out["pidfd_open_parent"] == "got", out  # a handle alone is allowed: see the docs
    assert out["parent"], "no descriptor of the parent was tried"
    assert set(out["parent"].values()) == {"EPERM"}, out["parent"]
    # Behind the filter, a second wall: the forwarder is not dumpable, so the ptrace check
    # refuses its descriptors (under Landlock, the parent is outside the command's domain).
    assert out["parent_fd_link"] == "EACCES", out

    # The control: unconfined, the same call takes the child's descriptor.
    free = make_host(allow_all=True)
    request = attrs.evolve(
        box.request([PYTHON, "-S", str(script), ""], mode="danger-full-access"), sandbox="none"
    )
    result = free.run(request)
    assert result.exit_code == 0, result.stderr.text
    assert json.loads(result.stdout.text)["own_child"] == "got"


LIMITS = """
import errno, json, os, resource, sys
out = {}
child = os.fork()
if child == 0:
    os.read(os.pipe()[0], 1)  # holds until killed
def attempt(name, pid, limits):
    try:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
        out[name] = "lowered"
    except OSError as error:
        out[name] = errno.errorcode[error.errno]
attempt("host_process", int(sys.argv[1]), (7, 7))
attempt("own_child", child, (7, 7))
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 1, hard))  # the control: our own
out["self"] = resource.getrlimit(resource.RLIMIT_NOFILE)[0] == soft - 1
out["read_child"] = resource.prlimit(child, resource.RLIMIT_NOFILE)[0] > 0
os.kill(child, 9)
os.waitpid(child, 0)
print(json.dumps(out))
"""


def nofile(pid: int) -> str:
    lines = Path(f"/proc/{pid}/limits").read_text().splitlines()
    return next(line for line in lines if line.startswith("Max open files"))


def test_a_command_cannot_lower_another_process_limits(host, box, make_host):
    victim = subprocess.Popen(["sleep", "300"])
    try:
        before = nofile(victim.pid)
        result = host.run(box.py(LIMITS, str(victim.pid)))
        assert result.exit_code == 0, result.stderr.text
        out = json.loads(result.stdout.text)
        # Under bubblewrap the host's process cannot even be named (ESRCH).
        assert out["host_process"] in {"EPERM", "ESRCH"}, out
        assert out["own_child"] == "EPERM", out  # the filter, not the namespace
        assert out["self"] and out["read_child"], out
        assert nofile(victim.pid) == before
        # The control: unconfined, the same call lowers the victim's limit.
        argv = [PYTHON, "-S", "-c", LIMITS, str(victim.pid)]
        request = attrs.evolve(box.request(argv, mode="danger-full-access"), sandbox="none")
        free = make_host(allow_all=True).run(request)
        assert free.exit_code == 0, free.stderr.text
        out = json.loads(free.stdout.text)
        assert (out["host_process"], out["own_child"]) == ("lowered", "lowered"), out
        assert nofile(victim.pid) != before
    finally:
        victim.kill()
        victim.wait()


class Proxy:
    """A stand-in for the egress proxy's Unix socket: answers ``pong`` + what it read."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(16)
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.sendall(b"pong " + conn.recv(100))

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join()


BRIDGED = ("socket:", "pipe:", "anon_inode:", "/memfd:", os.devnull)
"""What a descriptor the bridge could hold or leak refers to: its sockets and what it is
sent (the kinds :func:`make` makes)."""


def open_fds() -> set[str]:
    """The process's open descriptors of the kinds the bridge handles. Not the listing's own
    (closed once listed: where another part of the process holds a new descriptor below it,
    its number moves up and looked like a leak), and not a file another test's thread left
    open in this worker (a regular file is nothing the bridge is sent or opens)."""
    gc.collect()  # sockets left in cycles by earlier tests close now, not mid-count
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor
            continue
        if target.startswith(BRIDGED):
            found.add(fd)
    return found


def send(sock: socket.socket, data: bytes, fds: list[int]) -> None:
    sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])


def tcp_pair(listener: socket.socket, protocol: int = 0) -> tuple[socket.socket, socket.socket]:
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM, protocol)
    client.connect(listener.getsockname())
    server, _ = listener.accept()
    return client, server


Message = tuple[str, bytes, list[int]]


def hostile(listener: socket.socket) -> tuple[list[Message], list[socket.socket | int]]:
    """Messages the bridge must survive (name, data, descriptors), and what to close after."""
    reader, writer = os.pipe()
    pair = socket.socketpair()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    unbound = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.bind(("127.0.0.1", 0))
    listening.listen(1)
    nulls = [os.open(os.devnull, os.O_RDONLY) for _ in range(200)]
    memfd = os.memfd_create("hostile")
    directory = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    messages = [
        ("a pipe, as in the attack", b"c", [reader, writer]),
        ("garbage bytes", os.urandom(70000), []),
        ("a message cut short", b"c", []),
        ("200 descriptors (MSG_CTRUNC: the kernel closes the rest)", b"c", nulls),
        ("a Unix socket", b"c", [pair[0].fileno()]),
        ("a UDP socket", b"c", [udp.fileno()]),
        ("an unconnected TCP socket", b"c", [unbound.fileno()]),
        ("a listening TCP socket", b"c", [listening.fileno()]),
        ("a memfd, a directory, /dev/null", b"ccc", [memfd, directory, nulls[0]]),
    ]
    owned = [pair[0], pair[1], udp, unbound, listening]
    if has_mptcp():
        mptcp = tcp_pair(listener, IPPROTO_MPTCP)
        owned += mptcp
        messages.append(("a connected MPTCP stream", b"c", [mptcp[0].fileno()]))
    messages.append(("descriptors then garbage", b"c" + os.urandom(500), [reader, memfd]))
    return messages, [reader, writer, memfd, directory, *nulls, *owned]


def test_the_bridge_survives_hostile_messages_and_leaks_nothing(tmp_path):
    proxy = Proxy(tmp_path / "proxy.sock")
    before = open_fds()
    listener = socket.create_server(("127.0.0.1", 0))
    bridge = Bridge(proxy.path)
    forwarder = bridge.inside  # the end the sandbox holds
    messages, ours = hostile(listener)
    expected_refused = 0
    for _label, data, fds in messages:
        if fds:
            send(forwarder, data, fds)
        else:
            forwarder.sendall(data)
        expected_refused += min(len(fds), MAX_FDS)
    for thing in ours:
        if isinstance(thing, socket.socket):
            thing.close()
        else:
            os.close(thing)

    # The next connection is served, after every hostile message before it.
    client, server = tcp_pair(listener)
    with client:
        send(forwarder, b"c", [server.fileno()])
        server.close()
        client.sendall(b"ping")
        client.settimeout(30)
        assert client.recv(100) == b"pong ping"
    assert bridge._thread.is_alive()
    assert bridge.refused == expected_refused
    assert proxy.connections == 1

    bridge.close()
    listener.close()
    assert _wait_for(lambda: open_fds() <= before), _named(open_fds() - before)
    proxy.close()


KINDS = ("pipe", "devnull", "unix", "udp", "listening", "memfd")


def make(kind: str) -> list[int]:
    """Fresh descriptors of one kind, for the fuzzer to send."""
    if kind == "pipe":
        return list(os.pipe())
    if kind == "devnull":
        return [os.open(os.devnull, os.O_RDONLY)]
    if kind == "memfd":
        return [os.memfd_create("fuzz")]
    if kind == "unix":
        return [s.detach() for s in socket.socketpair()]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM if kind == "udp" else socket.SOCK_STREAM)
    if kind == "listening":
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
    return [sock.detach()]


@settings(
    max_examples=25,
    deadline=None,
    database=None,  # CI runs this as a user who cannot write the checkout
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(
        st.tuples(
            st.binary(min_size=1, max_size=3000), st.lists(st.sampled_from(KINDS), max_size=12)
        ),
        max_size=6,
    )
)
def test_any_input_leaves_the_bridge_serving(tmp_path, messages):
    proxy = Proxy(tmp_path / f"proxy-{os.urandom(4).hex()}.sock")
    before = open_fds()
    listener = socket.create_server(("127.0.0.1", 0))
    bridge = Bridge(proxy.path)
    for data, kinds in messages:
        fds = [fd for kind in kinds for fd in make(kind)]
        if fds:
            send(bridge.inside, data, fds)
        else:
            bridge.inside.sendall(data)
        for fd in fds:
            os.close(fd)
    client, server = tcp_pair(listener)
    with client:
        send(bridge.inside, b"c", [server.fileno()])
        server.close()
        client.sendall(b"ping")
        client.settimeout(30)
        assert client.recv(100) == b"pong ping"
    bridge.close()
    listener.close()
    assert _wait_for(lambda: open_fds() <= before), _named(open_fds() - before)
    proxy.close()


def _named(fds: set[str]) -> dict[str, str]:
    """What each descriptor left open refers to (a socket's inode, a pipe, a file)."""
    named = {}
    for fd in fds:
        try:
            named[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError as error:
            named[fd] = type(error).__name__
    return named


def _wait_for(predicate, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())
