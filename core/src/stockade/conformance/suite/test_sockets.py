"""A ``network`` command's sockets: TCP streams for the proxy path, and nothing else.

Without a network namespace a provider judges ports (Landlock's rules: TCP only), so a
stream of another protocol (MPTCP 262, SCTP 132) would connect straight to a loopback
listener the profile does not name. The attack sweeps every protocol number 0..300 (and a
few with bits the kernel drops) for both inet families, with and without
``SOCK_NONBLOCK | SOCK_CLOEXEC``, the other socket types, and the raw and packet families,
against live listeners on 127.0.0.1 and ::1 whose port is not allowed. The controls: the
allowed fetch through the proxy works in the same run, and the same sweep run unconfined
really reaches the listeners with MPTCP.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from stockade import hookimpl
from stockade.config.schema import Config, NetworkConfig
from stockade.confine.promises import Promise
from stockade.conformance.ground import PYTHON
from stockade.conformance.listen import Listener
from stockade.request.spec import Profile

BODY = "through the proxy\n"
EPERM = "EPERM"
STREAM, STREAM_FLAGS = 1, 1 | 0o4000 | 0o2000000  # SOCK_NONBLOCK | SOCK_CLOEXEC
AF_INET, AF_INET6, IPPROTO_MPTCP = 2, 10, 262
# Protocols whose high 32 bits the kernel drops (it reads an int): 262, 6 and 0 in disguise,
# and -1. The filter judges all 64 bits, so each is refused.
DISGUISED = [(1 << 32) | IPPROTO_MPTCP, (1 << 32) | 6, 1 << 32, (1 << 64) - 1, 1 << 31]
# family, type, protocol: the other types and the raw and packet families.
OTHERS = [
    *[(f, t, p) for f in (AF_INET, AF_INET6) for t in (2, 3, 4, 5, 6, 10) for p in (0, 1, 6, 17)],
    *[(f, t, p) for f in (AF_INET, AF_INET6) for t in (2, 3, 5) for p in (58, 132, 136, 255, 262)],
    (17, 3, 0x0300),  # AF_PACKET, SOCK_RAW, ETH_P_ALL
    (17, 2, 0x0008),  # AF_PACKET, SOCK_DGRAM, ETH_P_IP
    (AF_INET, 10, 0x0300),  # SOCK_PACKET
    (AF_INET, 3, 255),  # SOCK_RAW, IPPROTO_RAW
    (1, STREAM, 0),  # AF_UNIX (off unless unix_sockets)
    *[(family, STREAM, 0) for family in (21, 30, 40, 41, 43, 44)],  # RDS TIPC VSOCK KCM SMC XDP
]

SWEEP = """
import ctypes, errno, json, os, socket, sys, urllib.request
libc = ctypes.CDLL(None, use_errno=True)
targets, stream_protocols, others, url = json.loads(sys.argv[1])
out = {}
def attempt(family, kind, protocol):
    ctypes.set_errno(0)
    args = [ctypes.c_ulong(family), ctypes.c_ulong(kind), ctypes.c_ulong(protocol)]
    fd = libc.syscall(ctypes.c_long(41), *args)
    if fd < 0:
        return errno.errorcode[ctypes.get_errno()]
    if family not in (2, 10):
        os.close(fd)
        return "made"
    sock = socket.socket(fileno=fd)
    sock.settimeout(5)
    try:
        sock.connect(tuple(targets[str(family)]))
        return "reached"
    except OSError as error:
        return "made, " + errno.errorcode.get(error.errno, str(error))
    finally:
        sock.close()
for family in (2, 10):
    for kind in (1, 1 | 0o4000 | 0o2000000):
        for protocol in stream_protocols:
            out[f"{family}/{kind}/{protocol}"] = attempt(family, kind, protocol)
for family, kind, protocol in others:
    out[f"{family}/{kind}/{protocol}"] = attempt(family, kind, protocol)
if url:
    try:
        out["proxy"] = urllib.request.urlopen(url, timeout=30).read().decode()
    except Exception as error:
        out["proxy"] = "FAILED " + repr(error)
print(json.dumps(out))
"""


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY.encode())

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def counters() -> Iterator[dict[str, Listener]]:
    made = {
        str(AF_INET): Listener(AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0)),
        str(AF_INET6): Listener(AF_INET6, socket.SOCK_STREAM, ("::1", 0)),
    }
    yield made
    for counter in made.values():
        counter.close()


@pytest.fixture
def upstream() -> Iterator[int]:
    yield from serve_upstream()


def serve_upstream() -> Iterator[int]:
    """An HTTP server on 127.0.0.1 (its port), for the allowed fetch through the proxy."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


class Networked:
    """Classes the test's Python script as ``network`` (the table knows curl, not it)."""

    @hookimpl
    def stockade_classifier_rules(self):
        return {"python": lambda _args: ("network", "the test's script talks to a host")}


def net_config(box, port: int) -> Config:
    agent = Profile(name="net", hosts=(f"allowed.test:{port}",), ask=(), workspace=str(box.ws))
    return Config(
        sandbox=box.sandbox,
        agents={"net": agent},
        network=NetworkConfig(resolve={"allowed.test": "127.0.0.1"}),
    )


def has_mptcp() -> bool:
    """Whether this kernel lets a process open an MPTCP socket at all."""
    enabled = Path("/proc/sys/net/mptcp/enabled")
    if not enabled.exists() or enabled.read_text().strip() != "1":
        return False
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP).close()
    except OSError:
        return False
    return True


def sweep(host, box, counters, *, url: str = "", **kw):
    targets = {family: counter.address[:2] for family, counter in counters.items()}
    protocols = [*range(301), *DISGUISED]
    script = box.ws / "sweep.py"  # a file: `python -c` always waits for a person
    script.write_text(SWEEP)
    argv = [PYTHON, "-S", str(script), json.dumps([targets, protocols, OTHERS, url])]
    request = box.request(argv, **kw)
    if request.mode == "danger-full-access":
        request = attrs.evolve(request, sandbox="none")
    result = host.run(request)
    assert result.exit_code == 0, result.stderr.text
    return json.loads(result.stdout.text)


@pytest.mark.promise(Promise.EGRESS_PROXY)
def test_a_network_command_gets_tcp_streams_only(make_host, box, counters, upstream):
    host = make_host(config=net_config(box, upstream), plugins=[Networked()])
    out = sweep(host, box, counters, url=f"http://allowed.test:{upstream}/", profile="net")
    assert out.pop("proxy") == BODY, "the control: the allowed fetch goes through the proxy"
    reached = {key: value for key, value in out.items() if value == "reached"}
    assert not reached, f"straight to a listener the profile does not allow: {reached}"
    made = {key: value for key, value in out.items() if value != EPERM}
    kinds = (STREAM, STREAM_FLAGS)
    tcp = {f"{f}/{k}/{p}" for f in (AF_INET, AF_INET6) for k in kinds for p in (0, 6)}
    assert set(made) == tcp, made
    # Plain TCP to a port the profile lacks: refused by a port rule, or it meets a loopback
    # of the sandbox's own (a network namespace), where nothing listens.
    if box.keeps(Promise.NETWORK_NAMESPACE):
        assert set(made.values()) == {"made, ECONNREFUSED"}, made
    else:
        assert set(made.values()) <= {"made, EACCES", "made, EPERM"}, made
    assert not any(counter.hits for counter in counters.values())

    # The control: without the filter, the same sweep connects straight to the listeners.
    free = sweep(make_host(allow_all=True), box, counters, mode="danger-full-access")
    for family in (AF_INET, AF_INET6):
        assert free[f"{family}/{STREAM}/0"] == "reached", free[f"{family}/{STREAM}/0"]
        mptcp = free[f"{family}/{STREAM}/{IPPROTO_MPTCP}"]
        if has_mptcp():
            assert mptcp == "reached", f"this kernel has MPTCP, yet it did not connect: {mptcp}"
            assert free[f"{family}/{STREAM}/{(1 << 32) | IPPROTO_MPTCP}"] == "reached"
        else:
            assert mptcp != "reached", "this kernel lacks MPTCP: the MPTCP control is skipped"
    assert _wait_for(lambda: all(counter.hits >= 2 for counter in counters.values()))


def _wait_for(predicate, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())
