"""``stockade serve``: one user's warm server on a Unix socket.

Who may talk to it: a peer whose uid, as the kernel reports it (``SO_PEERCRED``), is the
server's own, *and* that presents the secret the server wrote to a 0600 file in the state
directory (hidden from every sandboxed command) when it started. The secret is compared in
constant time; a peer that fails either check gets a ``refused`` frame and nothing else.

Each connection has a thread. A malformed, truncated or oversized frame, or a client that
sends nothing for :data:`HELLO_TIMEOUT` seconds, gets an error frame and is closed; the
server goes on serving the others. It exits after ``idle`` seconds with no call running,
on ``stockade serve --stop``, or on SIGTERM/SIGINT; its commands die with it (the executor
ties them to it), so nothing outlives the server.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import os
import secrets
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping

from .. import owned
from . import code, protocol
from .calls import Call, CallError, check_call, route_streams
from .paths import Place
from .warm import WarmHosts

HELLO_TIMEOUT = 10.0
"""Seconds a client has to say hello and send its call after connecting."""

DEFAULT_IDLE = 15 * 60.0
"""Seconds with no call running after which the server exits."""

PER_PEER = 32
"""Connections one process may hold open at once; past it, more are refused (``busy``)."""

MAX_CONNECTIONS = 1024
"""Connections open at once, all peers together (fewer when descriptors are scarcer)."""

_PEERCRED = struct.Struct("3i")


def peer(conn: socket.socket) -> tuple[int, int]:
    """The pid and uid of the process at the other end, as the kernel recorded them at
    ``connect()``."""
    data = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    pid, uid, _gid = _PEERCRED.unpack(data)
    return int(pid), int(uid)


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end, as the kernel recorded it at connect."""
    return peer(conn)[1]


def raise_descriptor_limit() -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit; the soft limit now."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Server:
    """The warm server for one user and state directory.

    Args:
        environ: the environment it was started with (it says where the state lives).
        idle: seconds without a call before it exits.
    """

    def __init__(self, environ: Mapping[str, str], *, idle: float = DEFAULT_IDLE) -> None:
        self.place = Place(environ)
        self.environ = dict(environ)
        self.idle = idle
        self.warm = WarmHosts()
        self.code = code.identity()
        self.secret = secrets.token_hex(32)
        self.started = time.time()
        self._live = 0
        self._served = 0
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._calls: set[Call] = set()
        self._listener: socket.socket | None = None
        self._inode = -1
        self._peers: dict[int, int] = {}  # pid -> connections open now
        self._open = 0
        self.max_connections = MAX_CONNECTIONS
        self.draining = False

    # --- starting -------------------------------------------------------------------------

    def bind(self) -> None:
        """Make the folders, write the secret, then listen (a stale socket is replaced).

        Raises:
            OSError: the socket cannot be bound (another server is listening, say).
        """
        self.place.make()
        # Clients that find no server start one each, at once: only the first to hold the
        # lock binds; the others find it listening, and leave its secret and socket alone.
        with owned.locked(self.place.start_lock):
            self._bind()

    def _bind(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address, fd = self.place.address()
        try:
            if _answers(address):
                listener.close()
                raise OSError(f"another server is listening on {self.place.socket}")
            _write_private(self.place.token, self.secret)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(address)  # a dead server's socket
            old = os.umask(0o177)
            try:
                listener.bind(address)
            finally:
                os.umask(old)
        finally:
            if fd is not None:
                os.close(fd)
        self._inode = os.stat(self.place.socket).st_ino
        listener.listen(128)
        listener.settimeout(1.0)
        self._listener = listener
        _write_private(self.place.pid, f"{os.getpid()}\n")

    def serve_forever(self) -> int:
        """Accept clients until stopped or idle; 0."""
        if self._listener is None:
            self.bind()
        listener = self._listener
        assert listener is not None  # noqa: S101 - bound above
        route_streams()
        print(f"stockade serve: listening on {self.place.socket} (pid {os.getpid()})", flush=True)
        try:
            while not self._stop.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    if self._quiet_second():
                        break
                except OSError as error:
                    if self._stop.is_set():
                        break
                    # Out of descriptors (a flood, say), or a peer gone before accept():
                    # back-pressure, never an exit. Descriptors come back as calls end and
                    # idle peers time out.
                    if error.errno not in _SCARCE:
                        print(f"stockade serve: accept failed: {error}", flush=True)
                    time.sleep(0.05)
                else:
                    self._admit(conn)
        finally:
            self.close()
        return 0

    def _quiet_second(self) -> bool:
        """A second with no client connecting: sweep; whether it is time to exit."""
        self.warm.sweep()  # warm hosts and kept watches unused for a while
        if self._idle_for() > self.idle:
            print("stockade serve: idle, exiting", flush=True)
            return True
        if not self._still_here():
            print("stockade serve: its socket or secret is gone, exiting", flush=True)
            return True
        return False

    def _admit(self, conn: socket.socket) -> None:
        """Serve ``conn`` on a thread of its own, unless its process holds :data:`PER_PEER`
        connections already, or the server :attr:`max_connections` (``busy``: the client
        runs the call in-process)."""
        try:
            pid, _uid = peer(conn)
        except OSError:
            conn.close()
            return
        with self._lock:
            held = self._peers.get(pid, 0)
            busy = held >= PER_PEER or self._open >= self.max_connections
            if not busy:
                self._peers[pid] = held + 1
                self._open += 1
        if busy:
            conn.settimeout(1.0)
            _refuse(conn, "busy", "too many connections at once; try again, or run in-process")
            conn.close()
            return
        try:
            threading.Thread(
                target=self._serve, args=(conn, pid), name="stockade-serve", daemon=True
            ).start()
        except RuntimeError:  # no thread to be had: as busy
            self._let_go(pid)
            _refuse(conn, "busy", "the server cannot start a thread now; try again")
            conn.close()

    def _let_go(self, pid: int) -> None:
        with self._lock:
            self._open -= 1
            left = self._peers.get(pid, 1) - 1
            if left:
                self._peers[pid] = left
            else:
                self._peers.pop(pid, None)

    def prewarm(self) -> None:
        """Make the warm host for the environment the server started with, and load the
        command line's run path (errors are the first call's to report)."""
        with contextlib.suppress(Exception):
            host = self.warm.host(None, self.environ, "/")
            # A server killed before (SIGKILL) left started commands without a result:
            # opening the store closes their record with an ``aborted`` error now.
            recorder = host.pm.get_plugin("stockade.builtin.recorder")
            if recorder is not None:
                recorder.chain()
            host.close()
            from ..cli import commands, run  # noqa: F401 - loaded now, not in the first call

            commands._parser()

    def _still_here(self) -> bool:
        """Whether the socket and the secret are still this server's (not removed with the
        state folder, nor replaced by another server)."""
        try:
            return os.stat(self.place.socket).st_ino == self._inode and (
                _read(self.place.token) == self.secret
            )
        except OSError:
            return False

    def stop(self, *, drain: bool = False) -> None:
        """Stop accepting at once. Every running call is interrupted (its commands are
        killed, and its client told why); with ``drain``, they finish first instead (a
        newer server is taking over the socket)."""
        self._stop.set()
        self.draining = drain
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        if drain:
            return
        with self._lock:
            calls = list(self._calls)
        for call in calls:
            call.interrupt(why="the server was stopped (stockade serve --stop, or a signal)")

    def close(self, *, grace: float = 30.0) -> None:
        """Remove the socket, the secret and the pid file; once the calls still running have
        ended (they were interrupted: their commands are being killed and recorded; at most
        ``grace`` seconds), close the warm hosts."""
        self._stop.set()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        # Only what is still this server's: a new server may have replaced the files already.
        _unlink_if(self.place.socket, lambda: os.stat(self.place.socket).st_ino == self._inode)
        _unlink_if(self.place.token, lambda: _read(self.place.token) == self.secret)
        _unlink_if(self.place.pid, lambda: _read(self.place.pid).strip() == str(os.getpid()))
        # Draining, a call ends when its command does (within its own timeout).
        deadline = time.monotonic() + (max(grace, 3600.0) if self.draining else grace)
        while time.monotonic() < deadline:
            with self._lock:
                if not self._live:
                    break
            time.sleep(0.01)
        self.warm.close()

    def _idle_for(self) -> float:
        """Seconds since the last call ended; 0 while a call or a background task runs."""
        if self.warm.running():
            with self._lock:
                self._last = time.monotonic()
            return 0.0
        with self._lock:
            return 0.0 if self._live else time.monotonic() - self._last

    # --- one connection -------------------------------------------------------------------

    def _serve(self, conn: socket.socket, pid: int) -> None:
        try:
            self._converse(conn)
        except protocol.ProtocolError as error:
            _refuse(conn, error.code, error.message)
        except OSError:
            pass  # the client went away
        finally:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)  # wakes the call's listener, blocked reading
            conn.close()
            self._let_go(pid)

    def _converse(self, conn: socket.socket) -> None:  # noqa: PLR0911 - a return per refusal
        if peer_uid(conn) != os.getuid():
            _refuse(conn, "auth", "this server serves its own user only")
            return
        conn.settimeout(HELLO_TIMEOUT)
        hello = _expect(conn, "hello", limit=protocol.MAX_HELLO)  # nobody is trusted yet
        token = hello.get("token")
        if not isinstance(token, str) or not hmac.compare_digest(
            token.encode("utf-8", "surrogateescape"), self.secret.encode()
        ):
            _refuse(conn, "auth", "the secret does not match this server's")
            return
        op = hello.get("op", "call")
        if op in ("stop", "drain"):  # any version: a newer client replaces an older server
            protocol.send(conn, {"type": "stopping", "pid": os.getpid()})
            self.stop(drain=op == "drain")
            return
        if hello.get("version") != protocol.VERSION:
            _refuse(conn, "version", f"this server speaks {protocol.VERSION}")
            return
        now = code.identity()
        if now != self.code:  # an edit, an upgrade or a reinstall: a new server takes over
            _refuse(conn, "version", f"this server's code changed ({self.code} -> {now})")
            return
        protocol.send(conn, {"type": "welcome", "version": protocol.VERSION, "pid": os.getpid()})
        if op == "status":
            protocol.send(conn, self.status())
            return
        if op != "call":
            _refuse(conn, "bad_frame", f"unknown op {op!r}: call, status or stop")
            return
        message = _expect(conn, "call")
        try:
            argv, cwd, env, tty = check_call(message)
        except CallError as error:
            _refuse(conn, "bad_call", str(error))
            return
        conn.settimeout(None)
        self._call(conn, argv, cwd, env, tty=tty)

    def _call(
        self, conn: socket.socket, argv: list[str], cwd: str, env: dict[str, str], *, tty: bool
    ) -> None:
        call = Call(conn, self.warm)
        with self._lock:
            self._live += 1
            self._served += 1
            self._calls.add(call)
        try:
            try:
                status = call.run(argv, cwd, env, tty=tty)
            except Exception as error:  # noqa: BLE001 - one call's failure is not the server's
                import traceback

                traceback.print_exc()  # to the server's log
                call.send(_internal(error))
                status = 125
            if call.why:
                call.send({"type": "out", "fd": 2, "text": f"stockade: {call.why}\n"})
            call.send({"type": "exit", "status": status})
        finally:
            with self._lock:
                self._live -= 1
                self._calls.discard(call)
                self._last = time.monotonic()

    def status(self) -> dict[str, object]:
        """What ``stockade serve --status`` shows."""
        with self._lock:
            live, served = self._live, self._served
        return {
            "type": "status",
            "pid": os.getpid(),
            "version": protocol.VERSION,
            "code": self.code,
            "socket": self.place.socket,
            "started": self.started,
            "calls_running": live,
            "calls_served": served,
            "idle_timeout": self.idle if self.idle != float("inf") else None,
            "idle_for": round(self._idle_for(), 3),
            "warm_hosts": len(self.warm.hosts()),
            "watched": sorted(self.warm.watches.watched()),
        }


_SCARCE = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def _internal(error: Exception) -> dict[str, object]:
    text = (
        f"stockade: error[internal]: the server failed on this call: {type(error).__name__}: "
        f"{error}\n  hint: its log has the details; `stockade --no-server ...` runs in-process\n"
    )
    return {"type": "out", "fd": 2, "text": text}


def _expect(
    conn: socket.socket, kind: str, *, limit: int = protocol.MAX_FRAME
) -> dict[str, object]:
    try:
        message = protocol.receive(conn, limit=limit)
    except TimeoutError:
        raise protocol.ProtocolError(
            f"no {kind} frame within {HELLO_TIMEOUT:g} seconds", code="timeout"
        ) from None
    if message is None:
        raise protocol.ProtocolError(f"the connection closed before the {kind} frame")
    if message.get("type") != kind:
        raise protocol.ProtocolError(f"expected a {kind} frame, got {message.get('type')!r}")
    return message


def _refuse(conn: socket.socket, code: str, message: str) -> None:
    with contextlib.suppress(OSError, protocol.ProtocolError):
        protocol.send(conn, {"type": "refused", "code": code, "message": message})


def _answers(address: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(address)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _read(path: str) -> str:
    with open(path, encoding="ascii") as handle:
        return handle.read()


def _unlink_if(path: str, mine: Callable[[], bool]) -> None:
    with contextlib.suppress(OSError):
        if mine():
            os.unlink(path)


def _write_private(path: str, text: str) -> None:
    """``text`` to ``path``, 0600, replacing it atomically."""
    temp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)


def serve(environ: Mapping[str, str], *, idle: float = DEFAULT_IDLE, warm: bool = False) -> int:
    """Run the server in this process until it is stopped or idle; its exit status.
    ``warm``: make the default configuration's host as soon as it listens."""
    server = Server(environ, idle=idle)
    limit = raise_descriptor_limit()
    # Room for calls beyond the connections: each call opens pipes, pidfds, the store.
    server.max_connections = max(16, min(MAX_CONNECTIONS, limit // 4))
    try:
        server.bind()
    except OSError as error:
        print(f"stockade serve: cannot listen on {server.place.socket}: {error}", file=sys.stderr)
        return 125
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: server.stop())
    if warm:
        threading.Thread(target=server.prewarm, name="stockade-prewarm", daemon=True).start()
    return server.serve_forever()
