"""Each Landlock layer on its own, without seccomp behind it: TCP rules, the abstract-socket
and signal scopes, and file rules, tried from a throwaway thread against live targets."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading

import pytest
from stockade_landlock import abi

pytestmark = pytest.mark.sandboxes("landlock")


def _in_restricted_thread(ruleset: int, action):
    """Run ``action`` on a new thread restricted by ``ruleset``; its result or exception."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            abi.restrict_self(ruleset)
            box["result"] = action()
        except BaseException as error:  # noqa: BLE001 - handed back to the test
            box["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["result"]


@pytest.fixture
def level(sandbox):
    level = abi.version()
    assert level >= 6, f"these layers need Landlock ABI 6, the kernel has {level}"
    return level


@pytest.fixture
def listener():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()
    server.close()


def _connect(address):
    def go() -> str:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.connect(address)
                return "connected"
            except OSError as error:
                return error.strerror or str(error)

    return go


def test_tcp_connect_is_refused_by_the_net_rules_alone(level, listener):
    assert _connect(listener)() == "connected"  # control: the listener is live
    ruleset = abi.create_ruleset(level, fs=0, net=abi.net_rights(level))
    try:
        assert _in_restricted_thread(ruleset, _connect(listener)) == "Permission denied"
    finally:
        os.close(ruleset)
    allowed = abi.create_ruleset(level, fs=0, net=abi.net_rights(level))
    try:
        abi.add_port_rule(allowed, listener[1], abi.NET_CONNECT_TCP)  # the port, granted
        assert _in_restricted_thread(allowed, _connect(listener)) == "connected"
    finally:
        os.close(allowed)


def test_abstract_sockets_outside_the_domain_are_unreachable(level):
    name = f"\0stockade-layer-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(name)
    server.listen(1)

    def connect() -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(name)
                return "connected"
            except OSError as error:
                return error.strerror or str(error)

    try:
        assert connect() == "connected"
        ruleset = abi.create_ruleset(level, fs=0, scoped=abi.SCOPE_ABSTRACT_UNIX_SOCKET)
        try:
            assert _in_restricted_thread(ruleset, connect) == "Operation not permitted"
        finally:
            os.close(ruleset)
    finally:
        server.close()


def test_signals_outside_the_domain_are_refused(level):
    victim = subprocess.Popen(["sleep", "30"])
    try:
        ruleset = abi.create_ruleset(level, fs=0, scoped=abi.SCOPE_SIGNAL)

        def kill() -> str:
            try:
                os.kill(victim.pid, signal.SIGTERM)
                return "sent"
            except OSError as error:
                return error.strerror or str(error)

        try:
            assert _in_restricted_thread(ruleset, kill) == "Operation not permitted"
        finally:
            os.close(ruleset)
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_file_rules_allow_only_what_they_grant(level, tmp_path):
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    allowed.mkdir()
    other.mkdir()
    ruleset = abi.create_ruleset(level, fs=abi.fs_rights(level))
    try:
        abi.add_path_rule(ruleset, "/", abi.FS_READ)
        abi.add_path_rule(ruleset, str(allowed), abi.fs_rights(level))

        def write_both() -> tuple[str, str]:
            results = []
            for where in (allowed, other):
                try:
                    (where / "f").write_text("x")
                    results.append("wrote")
                except OSError as error:
                    results.append(error.strerror or str(error))
            return results[0], results[1]

        assert _in_restricted_thread(ruleset, write_both) == ("wrote", "Permission denied")
    finally:
        os.close(ruleset)
    (other / "f").write_text("the host thread was never restricted")
