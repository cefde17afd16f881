"""The warden: a helper process that kills every live run if the host process dies.

``PR_SET_PDEATHSIG`` would need code between fork and exec, which forces ``subprocess`` off
its fast ``vfork`` path and costs milliseconds per command. Instead one small helper per host
holds the read end of a pipe: the host writes ``+RUN_ID 0`` before a run is spawned,
``+RUN_ID PGID`` once its process group exists, and ``-RUN_ID`` when it ends. When the pipe
reaches end-of-file (the host exited, however it died), the warden kills the process group
of every live run and every process on the machine that carries a live run's
``STOCKADE_RUN_ID``, repeating until none is left.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

# Runs in a fresh interpreter (-S -I): standard library only, no Stockade import.
WARDEN_SOURCE = r"""
import os, signal, sys, time
live = {}
stream = os.fdopen(0, "rb", buffering=0)
pending = b""
while True:
    chunk = stream.read(65536)
    if not chunk:
        break
    pending += chunk
    *lines, pending = pending.split(b"\n")
    for line in lines:
        if line[:1] == b"+":
            run, _, pgid = line[1:].partition(b" ")
            live[run] = int(pgid)
        elif line[:1] == b"-":
            live.pop(line[1:], None)
if not live:
    sys.exit(0)
marks = {b"STOCKADE_RUN_ID=" + run for run in live}
for _ in range(50):
    found = 0
    for pgid in live.values():
        if pgid <= 0:
            continue
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open("/proc/" + name + "/environ", "rb") as f:
                env = set(f.read().split(b"\0"))
        except OSError:
            continue
        if env & marks:
            found += 1
            try:
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                pass
    if not found:
        break
    time.sleep(0.02)
"""


class Warden:
    """The host's side of the warden: started on first use, told about every run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner = 0

    @property
    def pid(self) -> int | None:
        """The warden's PID, once started."""
        return self._proc.pid if self._proc is not None else None

    def _ensure(self) -> subprocess.Popen[bytes] | None:
        if self._proc is not None and self._owner == os.getpid():
            return self._proc
        self._proc = subprocess.Popen(
            [sys.executable, "-S", "-I", "-c", WARDEN_SOURCE],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # outside the host's group: a Ctrl-C must not kill it first
        )
        self._owner = os.getpid()
        return self._proc

    def _send(self, line: str) -> None:
        with self._lock:
            proc = self._ensure()
            if proc is None or proc.stdin is None:
                return
            try:
                proc.stdin.write(line.encode() + b"\n")
                proc.stdin.flush()
            except BrokenPipeError:
                self._proc = None

    def watch(self, run_id: str, pgid: int = 0) -> None:
        """A run is starting (``pgid`` 0) or started: kill it if the host dies."""
        self._send(f"+{run_id} {pgid}")

    def release(self, run_id: str) -> None:
        """A run ended and was swept."""
        self._send(f"-{run_id}")

    def close(self) -> None:
        """Let the warden go: it sees end-of-file and exits, killing nothing (all released).

        It is reaped on a daemon thread: a caller closing a host does not wait for the
        warden's interpreter to finish starting up.
        """
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
            threading.Thread(target=proc.wait, name="stockade-warden-reap", daemon=True).start()
