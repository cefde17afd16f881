"""One client's call on the server: the command line's own code, run for the caller.

The call's argv is parsed and dispatched by :func:`stockade.cli.main`, exactly as in a process
of its own, so the text and the exit status are the same byte for byte. What differs is the
caller (:mod:`stockade.caller`): its environment and folder, a run of its own on a warm host,
its terminal for a prompt (the question travels to the client, the answer back), and its
interrupt (a ``signal`` frame, or the client going away, kills the command). What the call
writes to ``sys.stdout`` / ``sys.stderr`` goes to that client only: the server's streams are
routed per thread.
"""

from __future__ import annotations

import io
import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from . import protocol

if TYPE_CHECKING:
    import socket

    from .warm import WarmHosts


class _Routed(io.TextIOBase):
    """A process stream that writes to the current thread's call, else to the server's log."""

    def __init__(self, default: TextIO) -> None:
        self.default = default
        self.local = threading.local()

    def _target(self) -> TextIO:
        target: TextIO | None = getattr(self.local, "target", None)
        return self.default if target is None else target

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def isatty(self) -> bool:
        return False


class _Out(io.TextIOBase):
    """One of the client's streams: text goes out as ``out`` frames."""

    def __init__(self, send: Callable[[dict[str, object]], None], fd: int) -> None:
        self.send = send
        self.fd = fd

    def write(self, text: str) -> int:
        for start in range(0, len(text), protocol.CHUNK):
            self.send({"type": "out", "fd": self.fd, "text": text[start : start + protocol.CHUNK]})
        return len(text)


def route_streams() -> None:
    """Route ``sys.stdout`` and ``sys.stderr`` per thread (once, when the server starts)."""
    if not isinstance(sys.stdout, _Routed):
        sys.stdout = _Routed(sys.stdout)
    if not isinstance(sys.stderr, _Routed):
        sys.stderr = _Routed(sys.stderr)


class CallError(Exception):
    """A ``call`` frame that does not say what to run."""


def _strings(value: object, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise CallError(f"{what} must be a list of strings")
    return value


def check_call(message: dict[str, object]) -> tuple[list[str], str, dict[str, str], bool]:
    """The argv, folder, environment and whether the client has a terminal, checked.

    Raises:
        CallError: a field is missing or of the wrong type, or the command is not one the
            server runs.
    """
    argv = _strings(message.get("argv"), "argv")
    cwd, env, tty = message.get("cwd"), message.get("env"), message.get("tty", False)
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        raise CallError("cwd must be an absolute path")
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise CallError("env must be an object of strings")
    if not isinstance(tty, bool):
        raise CallError("tty must be true or false")
    if protocol.command_of(argv) is None:
        raise CallError(
            f"the server runs {', '.join(sorted(protocol.HOT))}; run the others in-process"
        )
    return argv, cwd, env, tty


class Call:
    """A client's call while it runs: its frames in, its streams and prompts out."""

    def __init__(self, conn: socket.socket, warm: WarmHosts) -> None:
        self.conn = conn
        self.warm = warm
        self._send_lock = threading.Lock()
        self._answers: queue.Queue[str | None] = queue.Queue()
        self._env: queue.Queue[tuple[str, str | None] | None] = queue.Queue()
        self._env_lock = threading.Lock()  # one question about the environment at a time
        self._stops: list[Callable[[], None]] = []
        self._stops_lock = threading.Lock()
        self.interrupted = threading.Event()
        self.gone = False
        self.why = ""

    def send(self, message: dict[str, object]) -> None:
        """One frame to the client (a client that went away is not an error here)."""
        if self.gone:
            return
        try:
            with self._send_lock:
                protocol.send(self.conn, message)
        except OSError:
            self.gone = True
            self.interrupt()

    def interrupt(self, *, why: str = "") -> None:
        """The client's Ctrl-C, it went away, or (``why``) the server stops: every command
        of the call is stopped."""
        if why and not self.interrupted.is_set():
            self.why = why
        self.interrupted.set()
        with self._stops_lock:
            stops = list(self._stops)
        for stop in stops:
            stop()
        self._answers.put(None)
        self._env.put(None)

    def on_interrupt(self, stop: Callable[[], None]) -> Callable[[], None]:
        with self._stops_lock:
            self._stops.append(stop)
        if self.interrupted.is_set():
            stop()

        def remove() -> None:
            with self._stops_lock:
                if stop in self._stops:
                    self._stops.remove(stop)

        return remove

    def ask(self, question: str) -> str:
        """The line the client's person typed after ``question`` ("" if it went away)."""
        self.send({"type": "ask", "text": question})
        answer = self._answers.get()
        return "" if answer is None else answer

    def getenv(self, name: str) -> str | None:
        """The client's variable ``name``, asked for now: one the client withheld from the
        call (its name looks like a secret); ``None`` if it has no such variable, or went."""
        with self._env_lock:
            if self.interrupted.is_set():
                return None
            self.send({"type": "env", "name": name})
            while True:
                answer = self._env.get()
                if answer is None:  # interrupted, or the client went away
                    self._env.put(None)  # for any later question
                    return None
                if answer[0] == name:
                    return answer[1]

    def listen(self) -> None:
        """Read the client's frames until the call ends: answers, signals, hang-up."""
        while True:
            try:
                message = protocol.receive(self.conn)
            except (OSError, protocol.ProtocolError):
                message = None
            if message is None:
                self.gone = True
                self.interrupt()
                return
            kind = message.get("type")
            if kind == "answer" and isinstance(message.get("text"), str):
                self._answers.put(str(message["text"]))
            elif kind == "env" and isinstance(message.get("name"), str):
                value = message.get("value")
                self._env.put((str(message["name"]), value if isinstance(value, str) else None))
            elif kind == "signal":
                self.interrupt()

    def run(self, argv: list[str], cwd: str, env: dict[str, str], *, tty: bool) -> int:
        """Run ``stockade ARGV`` for the client; its exit status."""
        from .. import caller
        from ..cli import main

        holds: list[Any] = []  # the warm hosts this call uses: none is closed meanwhile
        who = caller.Caller(
            environ=env,
            cwd=cwd,
            host=lambda config, run: self.warm.host(config, env, cwd, run, holds=holds),
            ask=self.ask if tty else None,
            on_interrupt=self.on_interrupt,
            getenv=self.getenv,
        )
        listener = threading.Thread(target=self.listen, name="stockade-call-listen", daemon=True)
        listener.start()
        token = caller.CALLER.set(who)
        out, err = sys.stdout, sys.stderr
        assert isinstance(out, _Routed) and isinstance(err, _Routed)  # noqa: S101 - route_streams
        out.local.target, err.local.target = _Out(self.send, 1), _Out(self.send, 2)
        try:
            return main(argv)
        except SystemExit as exit_:  # argparse's errors and --help
            code = exit_.code
            return code if isinstance(code, int) else (0 if code is None else 1)
        finally:
            out.local.target = err.local.target = None
            caller.CALLER.reset(token)
            self.warm.release(holds)
