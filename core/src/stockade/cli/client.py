"""The thin client: the hot commands through the warm server, standard library only.

``stockade run|pending|approve|decline ...`` sends its argv, folder, environment and whether
it has a terminal to the user's server (:mod:`stockade.server`), starting it on first use,
detached, and prints what comes back as it comes: the same text and exit status as the
in-process command, byte for byte. A prompt travels to this terminal and the answer back;
Ctrl-C (SIGINT, SIGTERM, SIGHUP) kills the command on the server; if this process is killed,
the server sees it go and kills the command too.

``--no-server`` or ``STOCKADE_NO_SERVER=1`` runs in-process; so does any other command. When
the server cannot be reached or started, the command runs in-process and one line on stderr
says why. A server of another version is stopped and replaced.

Its imports are the C modules under the standard library's own (``_socket``, ``_signal``):
``socket`` and ``signal`` each import ``enum`` for their constants, ~8 ms of a call that
should take 30.
"""

from __future__ import annotations

import _socket
import os
import sys
import time

from ..server import card, protocol
from ..server.paths import Place
from ..server.trust import folder_problem, listener_problem
from ..terminal import ask_terminal

TYPE_CHECKING = False  # not typing's: importing typing costs this client ~5 ms
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

START_TIMEOUT = 10.0
"""Seconds to wait for a server this client started to listen."""

IDLE_ENV = "STOCKADE_SERVER_IDLE"
NO_SERVER_ENV = "STOCKADE_NO_SERVER"


class NoServer(Exception):
    """Why this call runs in-process."""


class _Gone(NoServer):
    """The server closed the connection at hello: it was exiting (idle, or stopped) as
    this client connected. Nothing was asked of it, so a new one may be started."""


def call(argv: list[str], *, native: str | None = None) -> int | None:
    """Run ``stockade ARGV`` through the server: its exit status, or ``None`` to run it in
    this process instead (another command, ``--no-server``, or no server to be had).
    ``native``: the real path of the native client that handed this call over, which is
    left a card for the server this call reaches (:mod:`stockade.server.card`)."""
    if os.environ.get(NO_SERVER_ENV, "") not in ("", "0") or protocol.command_of(argv) is None:
        return None
    place = Place(os.environ)
    try:
        conn = connect(place, op="call")
    except NoServer as why:
        print(f"stockade: running in-process: {why}", file=sys.stderr)
        return None
    if native and os.path.isabs(native):
        try:  # noqa: SIM105 - contextlib is an import this client does not pay for
            card.leave(place, os.environ, native)
        except OSError:
            pass  # the next native call hands over again; this one goes on
    try:
        return converse(conn, argv)
    finally:
        conn.close()


def served(
    argv: list[str],
    *,
    environ: Mapping[str, str],
    cwd: str,
    out: Callable[[int, str], None],
    started: Callable[[Callable[[], None]], None] | None = None,
) -> int | None:
    """Run ``stockade ARGV`` through the server that runs for ``environ``, if one runs and
    passes the checks (none is started): its exit status, with its output handed to
    ``out(fd, text)``; ``None`` when there is no such server. ``started`` is given a
    function that interrupts the call (as Ctrl-C at a client does). For a program that is
    not the command line (the run page), so that what it asks is done as ``stockade`` does.
    ``STOCKADE_NO_SERVER`` in ``environ`` keeps it in-process, as it keeps the command line.
    """
    if environ.get(NO_SERVER_ENV, "") not in ("", "0"):
        return None
    try:
        conn = connect(Place(environ), op="call", start=False)
    except NoServer:
        return None
    call = {"type": "call", "argv": argv, "cwd": cwd, "env": needed_env(environ), "tty": False}

    def interrupt() -> None:
        try:
            protocol.send(conn, {"type": "signal"})
        except OSError:
            return

    try:
        protocol.send(conn, call)
        if started is not None:
            started(interrupt)
        while True:
            message = protocol.receive(conn)
            kind = None if message is None else message.get("type")
            if message is None or kind in (None, "refused"):
                why = "went away" if message is None else f"refused: {message.get('message')}"
                out(2, f"stockade: error[server_lost]: the server {why}\n")
                return 125
            if kind == "out":
                fd = message.get("fd")
                out(fd if isinstance(fd, int) else 2, str(message.get("text", "")))
            elif kind == "ask":  # no terminal here: an ask goes unanswered
                protocol.send(conn, {"type": "answer", "text": ""})
            elif kind == "env":
                protocol.send(conn, env_answer(message, environ))
            elif kind == "exit":
                status = message.get("status")
                return status if isinstance(status, int) else 1
    except (OSError, protocol.ProtocolError) as error:
        out(2, f"stockade: error[server_lost]: {error}\n")
        return 125
    finally:
        conn.close()


def connect(place: Place, *, op: str, start: bool = True) -> _socket.socket:
    """A connection the server welcomed for ``op``; the server started (or replaced, when
    it speaks another version) if need be.

    Nothing is sent to a server that fails :mod:`stockade.server.trust`'s checks.

    Raises:
        NoServer: none runs and ``start`` is false, it cannot be started or reached, or it
            is not to be trusted.
    """
    for attempt in range(3):
        conn = _open(place)
        if conn is None:
            if not start:
                raise NoServer(f"no server is listening on {place.socket}")
            conn = _start(place)
        try:
            reply = _hello(conn, place, op)
        except _Gone:
            conn.close()
            if not start or attempt == 2:
                raise
            _wait_gone(place)
            continue
        if reply.get("type") == "welcome":
            return conn
        conn.close()
        code, message = reply.get("code"), reply.get("message")
        if code != "version" or not start:
            raise NoServer(f"the server refused this client ({code}: {message})")
        stop(place, drain=True)  # another version: it finishes its calls, a new one listens
    raise NoServer("the server kept refusing this client's version")


def _open(place: Place) -> _socket.socket | None:
    """A connection to the server's socket, verified (its folders, then its listener's
    uid), or ``None`` when nothing listens there.

    Raises:
        NoServer: the folders or the listener are not this user's alone.
    """
    why = folder_problem(place.folder)
    if why:
        raise NoServer(f"refused the server at {place.socket}: {why}")
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        address, fd = place.address()
    except OSError:
        conn.close()
        return None
    try:
        conn.connect(address)
    except OSError:
        conn.close()
        return None
    finally:
        if fd is not None:
            os.close(fd)
    why = listener_problem(conn)
    if why:
        conn.close()
        raise NoServer(f"refused the server at {place.socket}: {why}")
    return conn


def _hello(conn: _socket.socket, place: Place, op: str) -> dict[str, object]:
    try:
        with open(place.token, encoding="ascii") as handle:
            token = handle.read().strip()
    except OSError as error:
        raise NoServer(f"cannot read the server's secret: {error}") from None
    try:
        protocol.send(
            conn, {"type": "hello", "version": protocol.VERSION, "token": token, "op": op}
        )
        reply = protocol.receive(conn)
    except ConnectionError as error:
        raise _Gone(f"the server closed the connection at hello: {error}") from None
    except (OSError, protocol.ProtocolError) as error:
        raise NoServer(f"the server did not answer: {error}") from None
    if reply is None:
        raise _Gone("the server closed the connection at hello")
    return reply


def _wait_gone(place: Place) -> None:
    """Wait (a little) for an exiting server to take its socket away, so that the next
    attempt starts a new one rather than reaching the old one's listener again."""
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and os.path.exists(place.socket):
        time.sleep(0.01)


def _start(place: Place) -> _socket.socket:
    """Start a server for this environment and wait until it listens."""
    from ..run.spawn import start_detached

    try:
        place.make()
        pid = start_detached(
            [sys.executable, "-m", "stockade.server"], log=place.log, env=dict(os.environ)
        )
    except OSError as error:
        raise NoServer(f"the server could not start: {error}") from None
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        conn = _open(place)
        if conn is not None:
            return conn
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            raise NoServer(f"the server exited at start (its log: {place.log})")
        time.sleep(0.005)
    raise NoServer(f"the server did not listen within {START_TIMEOUT:g}s (its log: {place.log})")


def stop(place: Place, *, drain: bool = False) -> bool:
    """Ask the server to stop (whatever its version); whether one was running. It stops
    listening at once; its running commands are killed, or with ``drain`` finish first."""
    conn = _open(place)
    if conn is None:
        return False
    try:
        reply = _hello(conn, place, "drain" if drain else "stop")
        if drain and reply.get("type") != "stopping":  # a server that cannot drain: stop it
            conn.close()
            conn = _open(place)
            if conn is None:
                return False
            _hello(conn, place, "stop")
    except NoServer:
        return False
    finally:
        if conn is not None:
            conn.close()
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline and os.path.exists(place.pid):
        time.sleep(0.01)
    return True


SECRET_WORDS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL")
"""What makes a name look like a secret: :data:`stockade.policy.resolve.SECRET_PATTERN`'s
words (a test keeps the two the same; this client cannot pay for importing ``re``)."""


def withheld(name: str) -> bool:
    """Whether a variable is left out of a call: its name looks like a secret (such a
    variable never reaches a command) and does not begin with ``STOCKADE_`` (the built-in
    broker's ``STOCKADE_SECRET_*`` credentials travel)."""
    return not name.startswith("STOCKADE_") and any(w in name.upper() for w in SECRET_WORDS)


def needed_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of ``environ`` a call needs: every variable not :func:`withheld`. A withheld
    one goes only when the server asks for it by name (:func:`env_answer`)."""
    return {name: value for name, value in environ.items() if not withheld(name)}


def env_answer(message: Mapping[str, object], environ: Mapping[str, str]) -> dict[str, object]:
    """The answer to the server's ``env`` frame: the withheld variable it names (its broker
    resolves a credential from it: a ``credentials.env_prefix`` of the user's own), or
    ``None``. A variable that is not withheld went with the call already."""
    name = message.get("name")
    value = environ.get(name) if isinstance(name, str) and withheld(name) else None
    return {"type": "env", "name": name if isinstance(name, str) else "", "value": value}


def _terminal() -> bool:
    try:
        if not os.isatty(sys.stdin.fileno()):
            return False
        os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))
    except (OSError, ValueError):
        return False
    return True


def converse(conn: _socket.socket, argv: list[str]) -> int:
    """Send the call, then print what comes back until its exit status."""
    if TYPE_CHECKING:
        import signal as _signal
    else:
        import _signal  # signal's own C module: signal imports enum

    def interrupted(_sig: int, _frame: object) -> None:
        try:
            protocol.send(conn, {"type": "signal"})
        except OSError:
            return  # the server is gone: the loop below says so

    call: dict[str, object] = {"type": "call", "argv": argv, "cwd": os.getcwd()}
    call.update(env=needed_env(os.environ), tty=_terminal())
    protocol.send(conn, call)
    for sig in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP):
        _signal.signal(sig, interrupted)
    streams = {1: sys.stdout, 2: sys.stderr}
    try:
        while True:
            try:
                message = protocol.receive(conn)
            except (OSError, protocol.ProtocolError) as error:
                message = {"type": "lost", "why": str(error)}
            kind = None if message is None else message.get("type")
            if kind == "out":
                assert message is not None  # noqa: S101 - kind says so
                stream = streams.get(message.get("fd"), sys.stderr)  # type: ignore[call-overload]
                stream.write(str(message.get("text", "")))
                stream.flush()
            elif kind == "ask":
                assert message is not None  # noqa: S101 - kind says so
                answer = ask_terminal(str(message.get("text", ""))) or ""
                protocol.send(conn, {"type": "answer", "text": answer})
            elif kind == "env":
                assert message is not None  # noqa: S101 - kind says so
                protocol.send(conn, env_answer(message, os.environ))
            elif kind == "exit":
                assert message is not None  # noqa: S101 - kind says so
                status = message.get("status")
                return status if isinstance(status, int) else 1
            elif kind == "refused":
                assert message is not None  # noqa: S101 - kind says so
                print(
                    f"stockade: error[server]: {message.get('code')}: {message.get('message')}",
                    file=sys.stderr,
                )
                return 125
            else:
                print(
                    "stockade: error[server_lost]: the server went away before the command "
                    "ended; `stockade replay` shows what the record says of it",
                    file=sys.stderr,
                )
                return 125
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
