"""The egress proxy: a network-class command's only way out, to the hosts its profile names.

A sandboxed ``network`` command has no interface but loopback. The host runs this proxy and
the sandbox reaches it through a Unix socket (bubblewrap: an in-sandbox forwarder exposes it
as ``127.0.0.1:PORT``) or a TCP port on the host's loopback (Landlock). The proxy speaks
HTTP/1.1 ``CONNECT host:port`` (a byte tunnel, for TLS) and plain HTTP forwarding
(``GET http://host/path``). It allows only the ``host:port`` pairs of the profile's ``hosts``
(:func:`parse_hosts`, :func:`decide`), resolves names itself (the sandbox has no DNS), keeps
loopback, link-local and private addresses unreachable unless a rule names them, and answers
everything it refuses with ``403`` and a plain-text body naming the reason and ``stockade``,
so an agent reading the error learns who refused and why.

Why it is hand-written: the job is small (one request head, a policy check, a relay) and
must be exactly this policy — no third-party proxy library enforces "these host:port pairs,
resolved here, never private addresses unless named" without being bent into it, and the
peers that used socat or a separate Node process paid for an extra moving part outside
Python. The standard library's asyncio does it in one thread with 256 KiB relay buffers on
non-blocking sockets (``loop.sock_recv_into`` / ``loop.sock_sendall``), which keeps a large
download well above 500 MB/s on loopback (``bench/egress.py``).

Every ``Proxy`` in the process serves on one daemon thread running its own event loop,
started on first use; the public methods are synchronous and thread-safe. The
``on_connection`` callback runs on that thread, once per connection attempt, when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import re
import socket
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

from attrs import frozen

from .errors import ConfigError

__all__ = ["Connection", "Proxy", "Rule", "decide", "parse_hosts"]

DEFAULT_PORT = 443
HTTP_PORT = 80
HEAD_LIMIT = 16 * 1024  # bytes of request head the proxy reads before refusing (431)
HEAD_TIMEOUT_S = 10.0  # a client must send its whole request head within this
CONNECT_TIMEOUT_S = 10.0  # resolving and connecting upstream, each
HALF_CLOSE_IDLE_S = 30.0  # once one direction of a tunnel ended, the other may idle this long
RELAY_CHUNK = 256 * 1024
DRAIN_S = 1.0  # after a refusal, how long the proxy reads what the client still sends
SHOWN_RULES = 8  # how many rules a refusal lists

_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)\Z")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
_IP = ipaddress.IPv4Address | ipaddress.IPv6Address
_T = TypeVar("_T")


@frozen
class Rule:
    """One allowed destination: a name (or a wildcard's suffix, or a literal IP) and a port."""

    host: str  # lower-case name, literal IP (IPv6 without brackets), or a wildcard's suffix
    port: int
    wildcard: bool  # "*.example.com": subdomains only, never example.com itself

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'*.' if self.wildcard else ''}{host}:{self.port}"


@frozen
class Connection:
    """What happened to one connection attempt, reported once when it ends.

    ``bytes_up`` counts what the proxy wrote upstream on the client's behalf (the tunnel's
    payload; for plain HTTP the rewritten request head and its body), ``bytes_down`` what it
    relayed from upstream to the client (for plain HTTP the whole response). A refused or
    malformed attempt has both 0; a malformed one has an empty ``host`` and port 0.
    """

    host: str
    port: int
    allowed: bool
    reason: str
    method: str  # "CONNECT", or the plain-HTTP method ("GET", "POST", ...)
    bytes_up: int
    bytes_down: int


# --- the policy ------------------------------------------------------------------------------


def _literal_ip(host: str) -> _IP | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _valid_name(name: str) -> bool:
    if not name or len(name) > 253 or not name.isascii():
        return False
    labels = name.split(".")
    return all(_LABEL.match(label) for label in labels) and not labels[-1].isdigit()


def _parse_entry(entry: str) -> Rule:
    def refuse(why: str) -> ConfigError:
        return ConfigError(
            f"hosts entry {entry!r}: {why}",
            hint='write "name", "name:port", "*.domain.tld", "1.2.3.4:port" or "[::1]:port"',
            details={"entry": entry},
        )

    text = entry.strip().lower()
    if not text:
        raise refuse("it is empty")
    if "://" in text or any(c in text for c in "/?#@ \t"):
        raise refuse("a host entry is a name and an optional port, not a URL or a path")
    if text.startswith("["):
        return _parse_bracketed(text, refuse)
    port = DEFAULT_PORT
    if text.count(":") > 1:
        raise refuse("an IPv6 address needs brackets, as in [::1]:443")
    if ":" in text:
        text, port_text = text.split(":")
        port = _parse_port(port_text, refuse)
    text = text.removesuffix(".")
    ip = _literal_ip(text)
    if ip is not None:
        return Rule(str(ip), port, False)
    wildcard = text.startswith("*.")
    name = text[2:] if wildcard else text
    if text == "*" or "*" in name:
        raise refuse(
            "'*' allows everything; a wildcard is only '*.' before a domain"
            if text == "*"
            else "a wildcard may only be '*.' at the very start"
        )
    if not _valid_name(name):
        raise refuse("not a valid host name or IP address")
    if "." not in name and not (name == "localhost" and not wildcard):
        raise refuse(f"{name!r} is a bare top-level domain; name a domain under it")
    return Rule(name, port, wildcard)


def _parse_bracketed(text: str, refuse: Callable[[str], ConfigError]) -> Rule:
    close = text.find("]")
    if close < 0:
        raise refuse("an unclosed '['")
    host, rest = text[1:close], text[close + 1 :]
    port = DEFAULT_PORT
    if rest:
        if not rest.startswith(":"):
            raise refuse("only ':port' may follow ']'")
        port = _parse_port(rest[1:], refuse)
    ip = _literal_ip(host)
    if not isinstance(ip, ipaddress.IPv6Address):
        raise refuse("brackets hold an IPv6 address")
    return Rule(str(ip), port, False)


def _parse_port(text: str, refuse: Callable[[str], ConfigError]) -> int:
    if not text.isdigit() or not text.isascii() or not 0 < int(text) < 65536:
        raise refuse(f"port {text!r} is not a number from 1 to 65535")
    return int(text)


def parse_hosts(hosts: Sequence[str]) -> tuple[Rule, ...]:
    """Parse a profile's ``hosts`` into rules; refuse anything too broad or malformed.

    ``"github.com"`` means port 443; ``"pypi.org:8443"``, ``"127.0.0.1:8080"`` and
    ``"[::1]:80"`` name a port; ``"*.example.com"`` matches subdomains only. ``"*"``, bare
    top-level domains (``"com"``, ``"*.io"``), empty entries, bad ports, wildcards anywhere
    but the start, and URLs or paths raise :class:`~stockade.errors.ConfigError`.
    Duplicates are dropped, order is kept.
    """
    if isinstance(hosts, str):
        raise ConfigError(
            f"hosts must be a list of entries, not the string {hosts!r}",
            hint=f'write hosts = ["{hosts}"]',
        )
    return tuple(dict.fromkeys(_parse_entry(entry) for entry in hosts))


def _normalize(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host.removesuffix(".")
    ip = _literal_ip(host)
    return str(ip) if ip is not None else host


def _match(rules: Sequence[Rule], host: str, port: int) -> Rule | None:
    for rule in rules:
        if rule.port != port:
            continue
        if rule.wildcard:
            if host.endswith("." + rule.host) and len(host) > len(rule.host) + 1:
                return rule
        elif host == rule.host:
            return rule
    return None


def _show(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def decide(rules: Sequence[Rule], host: str, port: int) -> tuple[bool, str]:
    """Whether ``host:port`` is allowed by ``rules``, and why, in words an agent can act on.

    Names compare case-insensitively and without a trailing dot; a wildcard rule matches
    subdomains of its suffix only; the port must match exactly.
    """
    name = _normalize(host)
    rule = _match(rules, name, port)
    target = _show(name, port)
    if rule is None:
        if not rules:
            return False, f"{target} is not reachable: the profile names no hosts"
        shown = ", ".join(str(r) for r in rules[:SHOWN_RULES])
        if len(rules) > SHOWN_RULES:
            shown += f", and {len(rules) - SHOWN_RULES} more"
        return False, f"{target} is not in the profile's hosts ({shown})"
    if rule.wildcard:
        return True, f"{target} matches {rule} in the profile's hosts"
    return True, f"{target} is in the profile's hosts"


def _forbidden(ip: _IP) -> str | None:
    """Why an address must not be reached unless a rule names it, or None."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for kind in ("loopback", "link_local", "unspecified", "multicast", "private", "reserved"):
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    return None if ip.is_global else "not globally routable"


# --- the serving thread ----------------------------------------------------------------------

_loop: asyncio.AbstractEventLoop | None = None
_loop_thread: threading.Thread | None = None
_loop_lock = threading.Lock()


def _shared_loop() -> asyncio.AbstractEventLoop:
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


def _call(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, _T]) -> _T:
    if threading.current_thread() is _loop_thread:
        coro.close()
        raise RuntimeError("the egress proxy's methods cannot be called from its own thread")
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


class _Refused(Exception):
    """Answer the client with ``status`` and ``text`` and end the attempt."""

    def __init__(self, status: str, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


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


class Proxy:
    """An HTTP CONNECT and forward proxy that reaches only the hosts its rules allow.

    ``resolve`` maps names to IP addresses and is consulted before DNS; a name found there
    may resolve to a loopback or private address. ``on_connection`` is called once per
    attempt, when it ends, on the proxy's thread; exceptions it raises are printed to stderr.
    """

    def __init__(
        self,
        rules: Sequence[Rule],
        *,
        resolve: Mapping[str, str] = {},
        on_connection: Callable[[Connection], None] | None = None,
    ) -> None:
        self._rules = tuple(rules)
        self._resolve: dict[str, _IP] = {}
        for name, address in resolve.items():
            ip = _literal_ip(address.strip().strip("[]"))
            if ip is None:
                raise ConfigError(f"resolve map: {address!r} (for {name!r}) is not an IP address")
            self._resolve[_normalize(name)] = ip
        self._on_connection = on_connection
        self._loop = _shared_loop()
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
        _call(self._loop, self._close())

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
            _call(self._loop, start())

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
            task = self._loop.create_task(self._handle(client))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _handle(self, client: socket.socket) -> None:
        attempt = _Attempt()
        upstream: list[socket.socket] = []
        try:
            await self._serve(client, attempt, upstream)
        except _Refused as refused:
            attempt.report = True
            attempt.reason = attempt.reason or refused.text
            await self._answer(client, refused.status, refused.text)
        except asyncio.CancelledError:
            if attempt.report:
                attempt.reason += "; ended by the host closing the proxy"
            raise
        except OSError as err:  # the client or the upstream went away mid-way
            attempt.reason += f"; ended by {err}"
        except Exception:  # noqa: BLE001 - one broken attempt must not take the proxy down
            print("stockade egress: a connection failed:", file=sys.stderr)
            traceback.print_exc()
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
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                await self._loop.sock_sendall(client, head + body)
            # A lingering close: closing with unread input would reset the connection and the
            # client could lose the answer, so read and drop what it still sends, briefly.
            client.shutdown(socket.SHUT_WR)
            drain = bytearray(HEAD_LIMIT)
            async with asyncio.timeout(DRAIN_S):
                while await self._loop.sock_recv_into(client, drain):
                    pass

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
                    filled += n
                    if end >= 0:
                        return bytes(buf[:end]), bytes(buf[end + 4 : filled])
                    if filled == HEAD_LIMIT:
                        raise _Refused(
                            "431 Request Header Fields Too Large",
                            f"the request head is over {HEAD_LIMIT} bytes",
                        )
        except TimeoutError:
            raise _Refused(
                "408 Request Timeout", f"no whole request head within {HEAD_TIMEOUT_S:g} s"
            ) from None

    async def _serve(
        self, client: socket.socket, attempt: _Attempt, upstream: list[socket.socket]
    ) -> None:
        try:
            head, rest = await self._read_head(client, attempt)
        except (_Closed, OSError):
            return
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not _TOKEN.match(parts[0]):
            raise _Refused("400 Bad Request", f"malformed request line {lines[0][:200]!r}")
        method, target, version = parts
        attempt.method = method
        if version not in ("HTTP/1.1", "HTTP/1.0"):
            raise _Refused("400 Bad Request", f"unsupported protocol {version[:20]!r}")
        headers = _parse_headers(lines[1:])
        tunnel = method.upper() == "CONNECT"
        if tunnel:
            host, port = _connect_target(target)
        else:
            host, port, path = _forward_target(target)
        attempt.host, attempt.port, attempt.report = host, port, True
        allowed, reason = decide(self._rules, host, port)
        attempt.reason = reason
        if not allowed:
            raise _Refused("403 Forbidden", reason)
        sock = await self._connect(host, port, attempt)
        upstream.append(sock)
        attempt.allowed = True
        if tunnel:
            await self._loop.sock_sendall(client, b"HTTP/1.1 200 Connection established\r\n\r\n")
            first = rest
        else:
            first = _forward_head(method, path, host, port, headers) + rest
        if first:
            await self._loop.sock_sendall(sock, first)
            attempt.counts[0] += len(first)
        await self._relay(client, sock, attempt.counts, response_ends=not tunnel)

    async def _connect(self, host: str, port: int, attempt: _Attempt) -> socket.socket:
        """Resolve ``host`` (map, literal, DNS), screen the addresses, connect to the first."""
        rule = _match(self._rules, host, port)
        literal = _literal_ip(host)
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
                raise _Refused("502 Bad Gateway", attempt.reason) from None
            addresses = list(dict.fromkeys(ipaddress.ip_address(i[4][0]) for i in infos))
        if not exempt:
            screened = [(ip, _forbidden(ip)) for ip in addresses]
            addresses = [ip for ip, why in screened if why is None]
            if not addresses:
                ip, why = screened[0]
                attempt.reason = (
                    f"{_show(host, port)} resolves to {ip} ({why}); stockade keeps local and "
                    "private addresses unreachable unless the profile's hosts name them"
                )
                raise _Refused("403 Forbidden", attempt.reason)
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
        raise _Refused("502 Bad Gateway", attempt.reason)

    async def _pump(
        self, src: socket.socket, dst: socket.socket, counts: list[int], i: int
    ) -> bool:
        """Copy ``src`` to ``dst`` until end of file (True) or an error (False)."""
        loop = self._loop
        buf = bytearray(RELAY_CHUNK)
        view = memoryview(buf)
        try:
            while True:
                n = await loop.sock_recv_into(src, buf)
                if n == 0:
                    break
                await loop.sock_sendall(dst, view[:n])
                counts[i] += n
        except OSError:
            return False
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
        return True

    async def _relay(
        self,
        client: socket.socket,
        upstream: socket.socket,
        counts: list[int],
        *,
        response_ends: bool,
    ) -> None:
        """Relay both ways. An error ends both; a clean end of one direction is passed on and
        the other may go on while it makes progress. ``response_ends``: the upstream's end is
        the end (plain HTTP, ``Connection: close``)."""
        up = self._loop.create_task(self._pump(client, upstream, counts, 0))
        down = self._loop.create_task(self._pump(upstream, client, counts, 1))
        try:
            done, pending = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
            if not all(task.result() for task in done) or (response_ends and down in done):
                return
            progress = sum(counts)
            while pending:
                done, pending = await asyncio.wait(pending, timeout=HALF_CLOSE_IDLE_S)
                if sum(counts) == progress:
                    return
                progress = sum(counts)
        finally:
            for task in (up, down):
                task.cancel()
            await asyncio.gather(up, down, return_exceptions=True)


def _describe(err: BaseException) -> str:
    if isinstance(err, OSError) and err.errno:
        return os.strerror(err.errno)
    return str(err) or type(err).__name__


class _Closed(Exception):
    """The client went away before sending a request head."""


def _parse_headers(lines: Sequence[str]) -> list[tuple[str, str]]:
    headers = []
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.match(name):
            raise _Refused("400 Bad Request", f"malformed header line {line[:200]!r}")
        headers.append((name, value.strip()))
    return headers


def _split_port(authority: str, default: int | None) -> tuple[str, int]:
    if authority.startswith("["):
        close = authority.find("]")
        host, rest = authority[1:close], authority[close + 1 :]
        if close < 0 or (rest and not rest.startswith(":")):
            raise _Refused("400 Bad Request", f"malformed authority {authority[:200]!r}")
        port_text = rest[1:] if rest else ""
    else:
        host, _, port_text = authority.rpartition(":") if ":" in authority else (authority, "", "")
    if not port_text:
        if default is None:
            raise _Refused("400 Bad Request", f"CONNECT needs host:port, got {authority[:200]!r}")
        return _normalize(host), default
    if not (port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536):
        raise _Refused("400 Bad Request", f"bad port in {authority[:200]!r}")
    if not host:
        raise _Refused("400 Bad Request", f"no host in {authority[:200]!r}")
    return _normalize(host), int(port_text)


def _connect_target(target: str) -> tuple[str, int]:
    return _split_port(target, None)


def _forward_target(target: str) -> tuple[str, int, str]:
    if not target.lower().startswith("http://"):
        why = (
            "send https:// requests with CONNECT"
            if target.lower().startswith("https://")
            else "this is a proxy: send CONNECT host:port or an absolute http:// URL"
        )
        raise _Refused("400 Bad Request", f"{why} (got {target[:200]!r})")
    parts = urlsplit(target)
    authority = parts.netloc.rpartition("@")[2]
    if not authority:
        raise _Refused("400 Bad Request", f"no host in {target[:200]!r}")
    host, port = _split_port(authority, HTTP_PORT)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return host, port, path


_HOP_BY_HOP = frozenset(("connection", "keep-alive", "te", "trailer", "upgrade", "host"))


def _forward_head(
    method: str, path: str, host: str, port: int, headers: Sequence[tuple[str, str]]
) -> bytes:
    """The request as the origin sees it: origin-form path, its own Host, no Proxy-* headers."""
    named = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == "connection"
        for token in value.split(",")
    }
    authority = f"[{host}]" if ":" in host else host
    if port != HTTP_PORT:
        authority += f":{port}"
    lines = [f"{method} {path} HTTP/1.1", f"Host: {authority}"]
    for name, value in headers:
        lower = name.lower()
        if lower.startswith("proxy-") or lower in _HOP_BY_HOP or lower in named:
            continue
        lines.append(f"{name}: {value}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class CommandProxy:
    """The egress proxy of one ``network`` command, in a private folder of its own."""

    def __init__(
        self, hosts: tuple[str, ...], resolve: Mapping[str, str], record: Callable[..., None]
    ) -> None:
        rules = parse_hosts(hosts)
        self.hosts = hosts
        self.folder = tempfile.mkdtemp(prefix="stockade-egress-")
        self.proxy = Proxy(rules, resolve=resolve, on_connection=record)
        try:
            self.socket = os.path.join(self.folder, "proxy.sock")
            self.proxy.serve_unix(self.socket)
            self.port = self.proxy.serve_tcp()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the proxy (open tunnels end) and remove its folder."""
        import shutil

        self.proxy.close()
        shutil.rmtree(self.folder, ignore_errors=True)
