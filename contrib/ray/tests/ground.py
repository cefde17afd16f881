"""What the Ray tests share: a box of canaries under the home, a live upstream, the
processes a token names (polling and liveness come from :mod:`stockade.conformance.procs`)."""

from __future__ import annotations

import os
import secrets
import socket
import threading
from pathlib import Path

from stockade.conformance.procs import alive
from stockade.layers import mounts

PYTHON = "/usr/bin/python3"  # the system interpreter: visible inside every sandbox


class Box:
    """A private folder under the home: ``ws`` (a workspace), ``outside`` (a canary)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.canary = "CANARY-" + secrets.token_hex(8)
        self.ws = root / "ws"
        self.outside = root / "outside"
        self.state = root / "state"
        for folder in (self.ws, self.outside, self.state):
            folder.mkdir()
        self.secret = self.outside / "secret.txt"
        self.secret.write_text(self.canary)


def running(token: str) -> list[int]:
    """The live processes whose command line holds ``token`` (host pids: a sandbox's own
    pid namespace numbers them otherwise)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                if token.encode() in handle.read() and alive(int(name)):
                    found.append(int(name))
        except OSError:
            continue
    return found


class Upstream:
    """A live HTTP server on loopback that counts the requests reaching it."""

    BODY = b"hello from the upstream\n"

    def __init__(self) -> None:
        self.hits = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(4096)
                    self.hits += 1
                    head = f"HTTP/1.0 200 OK\r\nContent-Length: {len(self.BODY)}\r\n\r\n"
                    conn.sendall(head.encode() + self.BODY)
                except OSError:
                    continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def unmount_forks(root: Path) -> None:
    """The forks a test kept mounted under ``root`` (as root), unmounted before it goes: a
    folder is never removed through a mount."""
    for point in mounts.overlays_beneath(str(root)):
        mounts.unmount(point)
