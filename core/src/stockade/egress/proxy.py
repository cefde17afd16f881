"""The egress proxy: a network-class command's only way out, to the hosts its profile names.

A sandboxed ``network`` command has no interface but loopback. The host runs this proxy and
the sandbox reaches it through a Unix socket (bubblewrap: an in-sandbox forwarder exposes it
as ``127.0.0.1:PORT``) or a TCP port on the host's loopback (Landlock). The proxy speaks
HTTP/1.1 ``CONNECT host:port`` (a byte tunnel, for TLS) and plain HTTP forwarding
(``GET http://host/path``). It allows only the ``host:port`` pairs of the profile's ``hosts``
(:mod:`stockade.egress.rules`), resolves names itself (the sandbox has no DNS), keeps
loopback, link-local and private addresses unreachable unless a rule names them, and answers
everything it refuses with a status and a plain-text body naming the reason and
``stockade``, so an agent reading the error learns who refused and why.

A name must be the same name all the way: a request head is parsed strictly
(:mod:`stockade.egress.http`; anything malformed gets 400), a forwarded request's ``Host``
must name its target, and inside a tunnel the TLS ClientHello must ask for the CONNECT host
(:mod:`stockade.egress.tls`); a tunnel to port 443 must carry TLS. Every attempt that sent
anything is reported once, refused or not, with the reason. A tunnel to a host that the
profile binds a credential to is handed to :mod:`stockade.egress.inject` instead.

Why hand-written: the job is small (a request head, a policy check, a relay) and must be
exactly this policy, which no proxy library enforces without being bent into it. asyncio
does it in one thread with 256 KiB buffers on non-blocking sockets (``bench/egress.py``).

Every ``Proxy`` in the process serves on one daemon thread running its own event loop,
started on first use; the public methods are synchronous and thread-safe. The
``on_connection`` callback runs on that thread, once per connection attempt, when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from attrs import frozen

from ..errors import ConfigError
from . import http, relay, tls
from .rules import IP, Rule, decide, forbidden, literal_ip, match, normalize, parse_hosts, show

if TYPE_CHECKING:
    from .inject import Injector

__all__ = ["Connection", "Proxy", "Rule", "decide", "parse_hosts"]

HEAD_LIMIT = 16 * 1024  # bytes of request head the proxy reads before refusing (431)
HEAD_TIMEOUT_S = 10.0  # a client must send its whole request head within this
CONNECT_TIMEOUT_S = 10.0  # resolving and connecting upstream, each


@frozen
class Connection:
    """What happened to one connection attempt, reported once when it ends.

    ``bytes_up`` counts what the proxy wrote upstream on the client's behalf (the tunnel's
    payload; for plain HTTP the rewritten request head and its body), ``bytes_down`` what it
    relayed from upstream to the client (for plain HTTP the whole response). A request
    refused before a tunnel opened has both 0; a tunnel refused for its first bytes has
    ``bytes_up`` 0. A request whose target could not be read has an empty ``host`` and port 0.
    """

    host: str
    port: int
    allowed: bool
    reason: str
    method: str  # "CONNECT", or the plain-HTTP method ("GET", "POST", ...)
    bytes_up: int
    bytes_down: int


class _Attempt:
    """The mutable facts of one attempt, frozen into a :class:`Connection` at its end."""

    def __init__(self) -> None:
        self.host = ""
        self.port = 0
        self.allowed = False
        self.reason = ""
        self.method = ""
        self.counts = [0, 0]  # up, down
        self.report = False
        self.answered = False  # the client got a status line: a refusal can no longer send one


class Proxy:
    """An HTTP CONNECT and forward proxy that reaches only the hosts its rules allow.

    ``resolve`` maps names to IP addresses and is consulted before DNS; a name found there
    may resolve to a loopback or private address. ``on_connection`` is called once per
    attempt, when it ends, on the proxy's thread; exceptions it raises are printed to stderr.
    ``inject``: the credentials it injects (:mod:`stockade.egress.inject`), if any.
    ``check``: asked on every connection its rules allow, when it is made, and again before
    each read of the client's bytes goes upstream, on the proxy's thread; a reason refuses
    it (403 when no answer began, else the connection is cut; the reason recorded), ``None``
    lets it on (the breaker where bytes leave:
    :meth:`stockade.policy.breaker.Breaker.at_connection`).
    """

    def __init__(
        self,
        rules: Sequence[Rule],
        *,
        resolve: Mapping[str, str] = {},
        on_connection: Callable[[Connection], None] | None = None,
        inject: Injector | None = None,
        check: Callable[[], str | None] | None = None,
    ) -> None:
        self._rules = tuple(rules)
        self._check = check
        self._inject = inject
        self._resolve: dict[str, IP] = {}
        for name, address in resolve.items():
            ip = literal_ip(address.strip().strip("[]"))
            if ip is None:
                raise ConfigError(f"resolve map: {address!r} (for {name!r}) is not an IP address")
            self._resolve[normalize(name)] = ip
        self._on_connection = on_connection
        self._loop = relay.shared_loop()
        self._listeners: list[tuple[socket.socket, asyncio.Task[None], str | None]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._lock = threading.Lock()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- public, synchronous -----------------------------------------------------------------

    def serve_unix(self, path: str) -> None:
        """Listen on a new Unix socket at ``path`` (mode 0600); return once listening.

        The socket is bound in a private directory beside ``path`` and renamed into place,
        so it is never reachable with a wider mode. ``path`` must not exist.
        """
        if os.path.lexists(path):
            raise FileExistsError(f"{path} already exists")
        staging = tempfile.mkdtemp(prefix=".stockade-egress-", dir=os.path.dirname(path) or ".")
        staged = os.path.join(staging, "s")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(staged)
            os.chmod(staged, 0o600)
            sock.listen(128)
            os.rename(staged, path)
        except BaseException:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(staged)
            raise
        finally:
            os.rmdir(staging)
        self._listen(sock, path)

    def serve_tcp(self, host: str = "127.0.0.1") -> int:
        """Listen on ``host`` at an ephemeral TCP port; return the port once listening."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((host.strip("[]"), 0))
            sock.listen(128)
        except BaseException:
            sock.close()
            raise
        port: int = sock.getsockname()[1]
        self._listen(sock, None)
        return port

    def close(self) -> None:
        """Stop listening, end open tunnels (each reports its connection) and wait; idempotent.

        Unix socket files this proxy created are removed.
        """
        with self._lock:
            self._closed = True
        relay.call(self._loop, self._close())

    # --- on the loop ---------------------------------------------------------------------------

    def _listen(self, sock: socket.socket, path: str | None) -> None:
        sock.setblocking(False)

        async def start() -> None:
            task = self._loop.create_task(self._accept(sock))
            self._listeners.append((sock, task, path))

        with self._lock:
            if self._closed:
                sock.close()
                if path is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                raise RuntimeError("this egress proxy is closed")
            relay.call(self._loop, start())

    async def _close(self) -> None:
        listeners, self._listeners = self._listeners, []
        for sock, task, path in listeners:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            sock.close()
            if path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = await self._loop.sock_accept(listener)
            except asyncio.CancelledError:
                raise
            except OSError as err:  # EMFILE and the like: do not spin, do not die
                print(f"stockade egress: accept failed: {err}", file=sys.stderr)
                await asyncio.sleep(0.1)
                continue
            client.setblocking(False)
            if client.family != socket.AF_UNIX:  # relayed records go at once, no Nagle wait
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = self._loop.create_task(self._handle(client))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _handle(self, client: socket.socket) -> None:
        attempt = _Attempt()
        upstream: list[socket.socket] = []
        try:
            await self._serve(client, attempt, upstream)
        except http.Refusal as refused:
            attempt.report, attempt.allowed, attempt.reason = True, False, refused.reason
            tunnel = isinstance(refused, relay.TunnelRefused)
            if (refused.status and not attempt.counts[1]) and (tunnel or not attempt.answered):
                await self._answer(client, refused.status, refused.reason)
            elif tunnel:
                alert = tls.ALERT_ACCESS_DENIED if getattr(refused, "alert", False) else b""
                await relay.linger(self._loop, client, alert)
        except asyncio.CancelledError:
            if attempt.report:
                attempt.reason += "; ended by the host closing the proxy"
            raise
        except OSError as err:  # the client or the upstream went away mid-way
            attempt.reason += f"; ended by {err}"
        except Exception as err:  # noqa: BLE001 - one broken attempt must not take the proxy down
            print("stockade egress: a connection failed:", file=sys.stderr)
            traceback.print_exc()
            attempt.report, attempt.allowed = True, False
            attempt.reason = f"the proxy failed on this request ({type(err).__name__}: {err})"
            if not (attempt.answered or attempt.counts[1]):
                await self._answer(client, "500 Internal Server Error", attempt.reason)
        finally:
            for sock in (client, *upstream):
                sock.close()
            if attempt.report:
                self._emit(attempt)

    def _emit(self, attempt: _Attempt) -> None:
        if self._on_connection is None:
            return
        up, down = attempt.counts
        record = Connection(
            attempt.host, attempt.port, attempt.allowed, attempt.reason, attempt.method, up, down
        )
        try:
            self._on_connection(record)
        except Exception:  # noqa: BLE001 - the callback's failure is reported, not fatal
            print("stockade egress: on_connection raised:", file=sys.stderr)
            traceback.print_exc()

    async def _answer(self, client: socket.socket, status: str, text: str) -> None:
        body = f"stockade egress proxy: {text}\n".encode()
        head = (
            f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        await relay.linger(self._loop, client, head + body)

    async def _read_head(self, client: socket.socket, attempt: _Attempt) -> tuple[bytes, bytes]:
        """The request head (without its blank line) and whatever the client sent after it."""
        buf = bytearray(HEAD_LIMIT)
        view = memoryview(buf)
        filled = 0
        try:
            async with asyncio.timeout(HEAD_TIMEOUT_S):
                while True:
                    n = await self._loop.sock_recv_into(client, view[filled:])
                    if n == 0:
                        if filled:
                            attempt.report = True
                            attempt.reason = "the client closed before a whole request head"
                        raise _Closed
                    end = buf.find(b"\r\n\r\n", max(0, filled - 3), filled + n)
                    http.check_partial(buf, max(0, filled - 1), filled + n if end < 0 else end)
                    filled += n
                    if end >= 0:
                        return bytes(buf[:end]), bytes(buf[end + 4 : filled])
                    if filled == HEAD_LIMIT:
                        raise http.BadRequest(
                            f"the request head is over {HEAD_LIMIT} bytes",
                            "431 Request Header Fields Too Large",
                        )
        except TimeoutError:
            raise http.Refusal(
                "408 Request Timeout", f"no whole request head within {HEAD_TIMEOUT_S:g} s"
            ) from None

    async def _serve(
        self, client: socket.socket, attempt: _Attempt, upstream: list[socket.socket]
    ) -> None:
        try:
            head, rest = await self._read_head(client, attempt)
        except (_Closed, OSError):
            return
        attempt.report = True
        request = http.parse_head(head)
        attempt.method = request.method
        tunnel = request.method == "CONNECT"
        if tunnel:
            host, port = http.connect_target(request.target)
        else:
            host, port, path = http.forward_target(request.target)
        attempt.host, attempt.port = host, port
        allowed, reason = decide(self._rules, host, port)
        attempt.reason = reason
        if not allowed:
            raise http.Refusal("403 Forbidden", reason)
        self._again(attempt, "403 Forbidden")
        screen = self._inject.screen(request, host, port) if self._inject else lambda _: None
        if tunnel:
            await self._tunnel(client, rest, attempt, upstream)
            return
        http.check_host_header(request, host, port)
        body = http.body_reader(request)
        screen(first := body.feed(rest))
        first = http.forward_head(request, path, host, port) + first
        sock = await self._connect(host, port, attempt)
        upstream.append(sock)
        attempt.allowed = True
        await self._loop.sock_sendall(sock, first)
        attempt.counts[0] += len(first)
        try:
            gate = relay.checked(
                lambda data: _screened(screen, body.feed(bytes(data))),
                lambda: self._again(attempt, "403 Forbidden"),
            )
            await relay.relay(
                self._loop, client, sock, attempt.counts, gate=gate, response_ends=True
            )
        finally:
            if body.excess:
                attempt.reason += (
                    f"; {body.excess} bytes after the request were dropped (one request per "
                    "connection)"
                )

    async def _tunnel(
        self, client: socket.socket, rest: bytes, attempt: _Attempt, upstream: list[socket.socket]
    ) -> None:
        """Open the tunnel, check the client's first bytes (the ClientHello), then relay."""
        sock = await self._connect(attempt.host, attempt.port, attempt)
        upstream.append(sock)
        await self._loop.sock_sendall(client, b"HTTP/1.1 200 Connection established\r\n\r\n")
        attempt.answered = True
        if self._inject is not None and self._inject.terminates(attempt.host, attempt.port):
            attempt.allowed = True
            await self._inject.serve(
                self._loop,
                client,
                sock,
                rest,
                attempt,
                again=lambda: self._again(attempt, "403 Forbidden"),
            )
            return
        watch = tls.HandshakeWatch(attempt.host)
        # A server that speaks first (SMTP, on a port other than 443) is heard while waiting.
        down = self._loop.create_task(
            relay.pump(self._loop, sock, client, attempt.counts, 1, gate=relay.watch_down(watch))
        )
        try:
            first, up_gate = await relay.first_bytes(self._loop, client, rest, attempt.port, watch)
            if self._inject is not None:  # a placeholder in the clear, in any tunnel: refused
                up_gate = self._inject.screen_tunnel(first, up_gate, attempt.host, attempt.port)
        except BaseException:
            down.cancel()
            await asyncio.gather(down, return_exceptions=True)
            raise
        attempt.allowed = True
        # Plain HTTP in the tunnel may still be answered; TLS or another protocol is cut.
        status = "403 Forbidden" if first and http.request_line_kind(first) else ""
        try:
            up_gate = relay.checked(up_gate, lambda: self._again(attempt, status, tunnel=True))
            if first:
                self._again(attempt, status, tunnel=True)  # it may have waited for them
                await self._loop.sock_sendall(sock, first)
                attempt.counts[0] += len(first)
        except BaseException:
            down.cancel()
            await asyncio.gather(down, return_exceptions=True)
            raise
        await relay.relay(self._loop, client, sock, attempt.counts, gate=up_gate, down=down)

    def _again(self, attempt: _Attempt, status: str, *, tunnel: bool = False) -> None:
        """Refuse (``status``, the check's reason) when the check refuses now: asked before
        each read of the client's bytes goes on, a connection opened while the run was clean
        sends nothing once it holds both."""
        if self._check is None or (refused := self._check()) is None:
            return
        attempt.allowed, attempt.reason = False, refused
        if tunnel:
            raise relay.TunnelRefused(refused, alert=False, status=status)
        raise http.Refusal(status, refused)

    async def _connect(self, host: str, port: int, attempt: _Attempt) -> socket.socket:
        """Resolve ``host`` (map, literal, DNS), screen the addresses, connect to the first."""
        rule = match(self._rules, host, port)
        literal = literal_ip(host)
        named = host in self._resolve or literal is not None
        exempt = named or (rule is not None and not rule.wildcard and rule.host == "localhost")
        if host in self._resolve:
            addresses = [self._resolve[host]]
        elif literal is not None:
            addresses = [literal]
        else:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    infos = await self._loop.getaddrinfo(
                        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
                    )
            except (OSError, TimeoutError) as err:
                attempt.reason += f"; but it cannot be resolved: {err or 'timed out'}"
                raise http.Refusal("502 Bad Gateway", attempt.reason) from None
            addresses = list(dict.fromkeys(ipaddress.ip_address(i[4][0]) for i in infos))
        if not exempt:
            screened = [(ip, forbidden(ip)) for ip in addresses]
            addresses = [ip for ip, why in screened if why is None]
            if not addresses:
                ip, why = screened[0]
                attempt.reason = (
                    f"{show(host, port)} resolves to {ip} ({why}); stockade keeps local and "
                    "private addresses unreachable unless the profile's hosts name them"
                )
                raise http.Refusal("403 Forbidden", attempt.reason)
        errors = []
        for ip in addresses:
            family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    await self._loop.sock_connect(sock, (str(ip), port))
            except (OSError, TimeoutError) as err:
                sock.close()
                errors.append(f"{ip}: {_describe(err)}")
                continue
            except BaseException:
                sock.close()
                raise
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        attempt.reason += f"; but connecting failed: {'; '.join(errors)}"
        raise http.Refusal("502 Bad Gateway", attempt.reason)


def _screened(screen: Callable[[bytes], None], data: bytes) -> bytes:
    screen(data)
    return data


def _describe(err: BaseException) -> str:
    if isinstance(err, OSError) and err.errno:
        return os.strerror(err.errno)
    return str(err) or type(err).__name__


class _Closed(Exception):
    """The client went away before sending a request head."""
