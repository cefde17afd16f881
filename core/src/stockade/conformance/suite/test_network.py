"""Network and socket attacks against live listeners on the host."""

from __future__ import annotations

import json
import os
import socket

import pytest

from stockade.confine.promises import Promise

from ..listen import Listener


@pytest.fixture
def listeners(box, tmp_path):
    made = {
        "tcp": Listener(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0)),
        "udp": Listener(socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", 0)),
        # Pathname sockets where the sandbox can see the directory, and where it cannot.
        "unix_visible": Listener(socket.AF_UNIX, socket.SOCK_STREAM, str(box.outside / "s")),
        "unix_host_tmp": Listener(socket.AF_UNIX, socket.SOCK_STREAM, str(tmp_path / "s")),
        "unix_abstract": Listener(
            socket.AF_UNIX, socket.SOCK_STREAM, f"\0stockade-test-{box.canary}"
        ),
    }
    yield made
    for listener in made.values():
        listener.close()


@pytest.mark.promise(Promise.NO_HOST_SOCKETS)
def test_listeners_are_reachable_from_the_host(listeners):
    # Control: each listener counts a connection from outside the sandbox.
    for name, listener in listeners.items():
        family = socket.AF_UNIX if name.startswith("unix") else socket.AF_INET
        with socket.socket(family, listener.kind) as s:
            if listener.kind == socket.SOCK_DGRAM:
                s.sendto(b"x", listener.address)
            else:
                s.connect(listener.address)
    assert _wait_for(lambda: all(x.hits for x in listeners.values()))


ATTACK = """
import json, socket, sys
targets = json.loads(sys.argv[1])
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "reached"
    except OSError as e:
        out[name] = e.strerror or str(e)
def tcp():
    with socket.create_connection(tuple(targets["tcp"]), timeout=1):
        pass
def udp():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"x", tuple(targets["udp"]))
def unix(path):
    def go():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(path)
    return go
def raw_family(family):
    def go():  # the raw syscall: Python's socket() would refuse a family over 32 bits
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.syscall(ctypes.c_long(41), ctypes.c_long(family), ctypes.c_long(1), 0)
        if fd < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        os.close(fd)
    return go
attempt("tcp", tcp)
attempt("udp", udp)
for name in ("unix_visible", "unix_host_tmp", "unix_abstract"):
    attempt(name, unix(targets[name]))
attempt("packet", raw_family(17))
attempt("inet_high_bits", raw_family(0x1_0000_0002))
pair = socket.socketpair()
pair[0].send(b"ok")
out["socketpair_control"] = pair[1].recv(2).decode()
print(json.dumps(out))
"""


@pytest.mark.promise(Promise.NO_HOST_SOCKETS)
def test_no_socket_reaches_the_host(host, box, listeners, mode):
    targets = {name: listener.address for name, listener in listeners.items()}
    targets["unix_abstract"] = (
        "\0" + targets["unix_abstract"][1:].decode()
        if isinstance(targets["unix_abstract"], bytes)
        else targets["unix_abstract"]
    )
    result = host.run(box.py(ATTACK, json.dumps(targets), mode=mode))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    assert out.pop("socketpair_control") == "ok"
    assert all(v != "reached" for v in out.values()), out
    assert not _wait_for(lambda: any(x.hits for x in listeners.values()), timeout=0.5)


def _wait_for(predicate, timeout=2.0):
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.mark.promise(Promise.NETWORK_NAMESPACE)
def test_only_loopback_inside(host, box):
    result = host.run(box.request(["cat", "/proc/net/dev"]))
    interfaces = [line.split(":")[0].strip() for line in result.stdout.text.splitlines()[2:]]
    assert interfaces == ["lo"]
    assert os.path.exists("/proc/net/dev")
