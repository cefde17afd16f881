"""How the egress proxy moves bytes: its one thread, the relay, and the tunnel's first bytes.

:func:`shared_loop` is the daemon thread every :class:`~stockade.egress.proxy.Proxy` of the process
serves on. :func:`relay` copies both ways with 256 KiB buffers on non-blocking sockets; a
:data:`Gate` on either way decides what of each read may go on (a request's body, a
tunnel's checked handshake or requests) and refuses by raising.
:func:`first_bytes` holds a tunnel's first client bytes until they pass: a TLS ClientHello
must ask for the CONNECT host (:mod:`stockade.egress.tls`), plain HTTP is checked request by
request (:class:`~stockade.egress.http.TunnelHttp`), a tunnel to port 443 must begin with
TLS, and other protocols on other ports pass unchecked.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from . import http as egress_http
from . import tls as egress_tls
from .rules import show

__all__ = [
    "Gate",
    "TunnelRefused",
    "call",
    "checked",
    "first_bytes",
    "linger",
    "pump",
    "relay",
    "shared_loop",
    "watch_down",
]

HELLO_TIMEOUT_S = 10.0  # a client must send its first bytes inside a tunnel within this
TLS_ONLY_PORTS = frozenset({443})  # a tunnel to these ports must begin with a TLS ClientHello
HELLO_PIECES = 256  # reads a ClientHello may take (each one is parsed again from the start)
HALF_CLOSE_IDLE_S = 30.0  # once one direction of a tunnel ended, the other may idle this long
RELAY_CHUNK = 256 * 1024
DRAIN_S = 1.0  # after a refusal, how long the proxy reads what the client still sends
SEND_S = 10.0  # sending a refusal's last bytes
_T = TypeVar("_T")


_loop: asyncio.AbstractEventLoop | None = None
_loop_thread: threading.Thread | None = None
_loop_lock = threading.Lock()


def shared_loop() -> asyncio.AbstractEventLoop:
    """The process's proxy event loop, started on a daemon thread on first use."""
    global _loop, _loop_thread
    with _loop_lock:
        if _loop is None or _loop_thread is None or not _loop_thread.is_alive():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            thread = threading.Thread(target=run, name="stockade-egress", daemon=True)
            thread.start()
            ready.wait()
            _loop, _loop_thread = loop, thread
        return _loop


def call(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` on the proxy's thread and wait for its result (never from that thread)."""
    if threading.current_thread() is _loop_thread:
        coro.close()
        raise RuntimeError("the egress proxy's methods cannot be called from its own thread")
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


class TunnelRefused(egress_http.Refusal):
    """A refusal after ``200 Connection established``: close, with a TLS alert if ``alert``,
    or with an HTTP answer of ``status`` (an HTTP tunnel) if nothing came down yet."""

    def __init__(self, reason: str, *, alert: bool, status: str = "") -> None:
        super().__init__(status, reason)
        self.alert = alert


async def linger(loop: asyncio.AbstractEventLoop, client: socket.socket, last: bytes) -> None:
    """Send ``last`` and close gently: reading and dropping what the client still sends,
    briefly, since closing with unread input resets the connection and loses the answer."""
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(SEND_S):
            await loop.sock_sendall(client, last)
        client.shutdown(socket.SHUT_WR)
        drain = bytearray(RELAY_CHUNK // 16)
        async with asyncio.timeout(DRAIN_S):
            while await loop.sock_recv_into(client, drain):
                pass


Gate = Callable[[memoryview], "bytes | memoryview"]  # what of a chunk read may be sent on


async def first_bytes(
    loop: asyncio.AbstractEventLoop,
    client: socket.socket,
    rest: bytes,
    port: int,
    watch: egress_tls.HandshakeWatch,
) -> tuple[bytes, Gate | None]:
    """The client's first bytes in the tunnel once they pass, and the gate for the rest;
    or :class:`TunnelRefused`.

    TLS: the ClientHello passed, and what follows goes through ``watch``. HTTP: each request
    goes through a :class:`~stockade.egress.http.TunnelHttp`. Anything else (on a port that
    allows it) ends the watch and passes unchecked.
    """
    buf = bytearray(rest)
    chunk = bytearray(RELAY_CHUNK // 16)
    try:
        async with asyncio.timeout(HELLO_TIMEOUT_S):
            for _ in range(HELLO_PIECES):
                kind, size = _kind(bytes(buf), watch.host, port) if buf else ("", 0)
                gate: Gate
                if kind == "tls":
                    gate = functools.partial(_watched, watch)
                    return bytes(buf[:size]) + gate(memoryview(buf)[size:]), gate
                if kind == "http":
                    watch.done = True
                    gate = functools.partial(_http, egress_http.TunnelHttp(watch.host, port))
                    return bytes(gate(memoryview(buf))), gate
                if kind == "other":
                    watch.done = True
                    return bytes(buf), None
                n = await loop.sock_recv_into(client, chunk)
                if n == 0:
                    if buf:
                        raise TunnelRefused(
                            "the client closed the tunnel in the middle of its first message",
                            alert=False,
                        )
                    return b"", None
                buf += chunk[:n]
            raise TunnelRefused(
                f"the client sent its first message in over {HELLO_PIECES} pieces", alert=True
            )
    except TimeoutError:
        raise TunnelRefused(
            "the client sent no whole first message (a TLS ClientHello, a line) in the tunnel "
            f"within {HELLO_TIMEOUT_S:g} s",
            alert=False,
        ) from None


def _kind(data: bytes, host: str, port: int) -> tuple[str, int]:
    """What the first bytes are once they pass: ("tls", size of the ClientHello), ("http",
    0), ("other", 0), or ("", 0) while more are needed; else refuse."""
    target = show(host, port)
    if not egress_tls.looks_like_tls(data[0]):
        if port in TLS_ONLY_PORTS:
            raise TunnelRefused(
                f"the tunnel to {target} does not begin with TLS; stockade carries only TLS "
                "to port 443 (send plain HTTP as http:// through the proxy)",
                alert=False,
            )
        http = egress_http.request_line_kind(data)
        return ("", 0) if http is None else ("http" if http else "other", 0)
    try:
        hello = egress_tls.read_client_hello(data)
    except egress_tls.NotHello as err:
        raise TunnelRefused(
            f"the tunnel to {target} begins like TLS but holds no well-formed ClientHello: {err}",
            alert=True,
        ) from None
    if hello is None:
        return "", 0
    why = egress_tls.verdict(hello, host)
    if why is not None:
        raise TunnelRefused(why, alert=True)
    return "tls", hello.size


def _watched(watch: egress_tls.HandshakeWatch, data: memoryview) -> bytes | memoryview:
    if watch.idle:
        return data
    try:
        return watch.up(bytes(data))
    except egress_tls.NotHello as err:
        raise TunnelRefused(str(err), alert=True) from None


def _http(requests: egress_http.TunnelHttp, data: memoryview) -> bytes:
    try:
        return requests.feed(bytes(data))
    except egress_http.Refusal as err:
        raise TunnelRefused(err.reason, alert=False, status=err.status) from None


def checked(gate: Gate | None, again: Callable[[], None]) -> Gate:
    """``gate`` (or every byte, when ``None``), after ``again`` before each read: it refuses
    by raising (the breaker, asked again on a live connection)."""

    def gated(data: memoryview) -> bytes | memoryview:
        again()
        return data if gate is None else gate(data)

    return gated


def watch_down(watch: egress_tls.HandshakeWatch) -> Gate:
    """The down gate of a tunnel: the server's bytes pass, seen by the handshake ``watch``."""

    def down(data: memoryview) -> memoryview:
        if not watch.done:
            watch.down(bytes(data))
        return data

    return down


async def pump(
    loop: asyncio.AbstractEventLoop,
    src: socket.socket,
    dst: socket.socket,
    counts: list[int],
    i: int,
    *,
    gate: Gate | None = None,
) -> bool:
    """Copy ``src`` to ``dst`` (what ``gate`` lets through, when given) until end of file
    (True) or an error (False); a gate refuses by raising (:class:`egress_http.Refusal`)."""
    buf = bytearray(RELAY_CHUNK)
    view = memoryview(buf)
    try:
        while True:
            n = await loop.sock_recv_into(src, buf)
            if n == 0:
                break
            data = view[:n] if gate is None else gate(view[:n])
            if data:
                await loop.sock_sendall(dst, data)
                counts[i] += len(data)
    except OSError:
        return False
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)
    return True


async def relay(
    loop: asyncio.AbstractEventLoop,
    client: socket.socket,
    upstream: socket.socket,
    counts: list[int],
    *,
    gate: Gate | None = None,
    down: asyncio.Task[bool] | None = None,
    response_ends: bool = False,
) -> None:
    """Relay both ways. An error ends both; a clean end of one direction is passed on and
    the other may go on while it makes progress. The client's bytes pass through ``gate``;
    ``down`` is a running upstream-to-client pump, if one was started. ``response_ends``:
    the upstream's end is the end (plain HTTP, ``Connection: close``)."""
    up = loop.create_task(pump(loop, client, upstream, counts, 0, gate=gate))
    if down is None:
        down = loop.create_task(pump(loop, upstream, client, counts, 1))
    try:
        done, pending = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        if not all(task.result() for task in done) or (response_ends and down in done):
            return
        progress = sum(counts)
        while pending:
            done, pending = await asyncio.wait(pending, timeout=HALF_CLOSE_IDLE_S)
            for task in done:
                task.result()  # a gate's refusal ends the attempt, whichever side ended first
            if sum(counts) == progress:
                return
            progress = sum(counts)
    finally:
        for task in (up, down):
            task.cancel()
        await asyncio.gather(up, down, return_exceptions=True)
