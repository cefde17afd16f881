"""One tunnel terminated for credential injection: its requests, one after the other.

:class:`Session` reads each request from the client, has :class:`~stockade.egress.inject.Injector`
rewrite and screen it, asks the breaker again before anything goes upstream, and relays the
response through a :class:`~stockade.egress.stream.Mask` of the injected secrets.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from . import http, stream
from .rules import show

if TYPE_CHECKING:
    from .inject import Injector

__all__ = ["RESPONSE_HEAD_LIMIT", "Facts", "Session", "ended", "shut"]

HEAD_LIMIT = 16 * 1024  # one request head
RESPONSE_HEAD_LIMIT = 64 * 1024
CLOSE_S = 1.0  # a TLS close waits this long for the peer's close_notify
IDLE_S = 30.0  # a kept-alive connection may wait this long for its next request
_NO_BODY = (204, 304)


class Facts(Protocol):
    """What an injecting tunnel reports on (the proxy's attempt)."""

    host: str
    port: int
    counts: list[int]
    reason: str


class Session:
    """One terminated tunnel: its requests, one after the other."""

    def __init__(
        self,
        injector: Injector,
        client: stream.Source,
        writer: asyncio.StreamWriter,
        facts: Facts,
        again: Callable[[], None],
    ) -> None:
        self.injector, self.client, self.writer = injector, client, writer
        self.again = again
        self.host, self.port, self.facts = facts.host, facts.port, facts
        self.requests = 0
        self.injected: dict[str, int] = {}
        self.partial = False  # part of a response went down: no other answer fits now

    def summary(self) -> str:
        if not self.requests:
            return ""
        used = ", ".join(
            f"credential {i.handle!r} put into {i.header} in {self.injected[i.handle]}"
            for i in self.injector.injections
            if i.handle in self.injected
        )
        return f"; TLS terminated for injection, {self.requests} requests" + (
            f": {used}" if used else ": no credential used"
        )

    async def send(self, data: bytes) -> None:
        self.partial = True
        self.writer.write(data)
        await self.writer.drain()
        self.facts.counts[1] += len(data)

    async def answer(self, status: str, text: str) -> None:
        """A refusal inside the tunnel, then the end of it."""
        body = f"stockade egress proxy: {text}\n".encode()
        head = (
            f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        with contextlib.suppress(OSError, ssl.SSLError):
            await self.send(head + body)

    async def run(self, upstream: stream.Source, up_writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    async with asyncio.timeout(IDLE_S):
                        if await self.client.at_end():
                            return
                    async with asyncio.timeout(IDLE_S):
                        head = await self.client.until(b"\r\n\r\n", HEAD_LIMIT, "a request head")
                except (EOFError, TimeoutError):
                    return
                request = http.parse_head(head[:-4])
                out, check, expect = self._rewrite(request)
                body = http.body_reader(request)  # ambiguous framing: refused before it goes
                self.requests += 1
                self.again()
                up_writer.write(out)
                self.facts.counts[0] += len(out)
                if expect:  # interim: a final answer (a refusal too) may still follow
                    self.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                await self._body(body, check, up_writer)
                keep = await self._response(request, upstream)
                self.partial = False
                if not keep:
                    return
        except http.Refusal as refused:
            if not self.partial:
                await self.answer(refused.status, refused.reason)
            raise ended(refused.reason) from None
        except EOFError:
            if self.partial:
                why = f"{show(self.host, self.port)} closed the connection in mid-response"
                raise ended(why) from None

    def _rewrite(self, request: http.Request) -> tuple[bytes, Callable[[bytes], None], bool]:
        """The request as it goes upstream (the secret in place), its body's check, and
        whether the client waits for ``100 Continue`` (the proxy answers it, at once)."""
        http.check_in_tunnel(request, self.host, self.port)
        injector, host, port = self.injector, self.host, self.port
        if (found := injector.carried(request.target.encode("latin-1"))) is not None:
            raise injector.refuse(found, "its target (the URL)", host, port)
        headers, expect = [], False
        for name, value in request.headers:
            if (named := injector.carried(name.encode("ascii"))) is not None:
                raise injector.refuse(named, "the name of a header", host, port)
            lower = name.lower()
            if lower == "expect" and value.lower() == "100-continue":
                expect = True
                continue
            if lower == "accept-encoding":
                continue
            if lower in ("range", "if-range"):
                raise http.Refusal(
                    "403 Forbidden",
                    f"a ranged request ({name}) to {show(host, port)}, which gets a credential: "
                    "stockade masks a whole answer, so pieces of several could rebuild it",
                )
            found = injector.carried(value.encode("latin-1"))
            if found is None:
                headers.append((name, value))
                continue
            if (found.host, found.port, found.header) != (host, port, lower):
                raise injector.refuse(found, f"the {name} header", host, port)
            headers.append((name, found.rendered))
            self.injected[found.handle] = self.injected.get(found.handle, 0) + 1
        headers.append(("Accept-Encoding", "identity"))
        out = http.Request(request.method, request.target, request.version, tuple(headers))
        return out.serialize(), injector.body_check(host, port), expect

    async def _body(
        self, body: http.BodyReader, check: Callable[[bytes], None], up: asyncio.StreamWriter
    ) -> None:
        while not body.done:
            data = await self.client.some()
            part = body.feed(data)
            if len(part) < len(data):
                self.client.unread(data[len(part) :])
            check(part)
            self.again()
            up.write(part)
            await up.drain()
            self.facts.counts[0] += len(part)

    def _check_head(self, status: int, fields: list[tuple[str, str]]) -> None:
        """Refuse a response the mask cannot make safe: compressed, or a piece of one."""
        if _field(fields, "content-encoding") not in ("", "identity"):
            raise http.Refusal(
                "502 Bad Gateway",
                f"{show(self.host, self.port)} sent a compressed response (Content-Encoding "
                f"{_field(fields, 'content-encoding')}), which stockade cannot scrub of the "
                "credential",
            )
        if status == 206 or _field(fields, "content-range"):  # a piece, even unasked
            raise http.Refusal(
                "502 Bad Gateway",
                f"{show(self.host, self.port)} sent part of a response (206 or "
                "Content-Range), which could hold part of the credential unmasked",
            )

    async def _response(self, request: http.Request, upstream: stream.Source) -> bool:
        """Relay the response (interim ones first), masked; whether the connection goes on."""
        mask = stream.Mask(self.injector.secrets, self.injector.patterns, self.injector.pieces)
        while True:
            head = await upstream.until(b"\r\n\r\n", RESPONSE_HEAD_LIMIT, "a response head")
            status, fields = _response_head(head)
            self._check_head(status, fields)
            await self.send(mask.feed(head) + mask.flush())
            if status == 101:
                raise http.Refusal("502 Bad Gateway", "the upstream switched protocols")
            if status >= 200:
                break
        asked = ",".join(request.values("connection")).lower()
        close = "close" in f"{_field(fields, 'connection').lower()} {asked}" or (
            request.version == "HTTP/1.0"
        )
        coding, length = _field(fields, "transfer-encoding"), _field(fields, "content-length")
        if request.method == "HEAD" or status in _NO_BODY:
            return not close
        if coding:
            if coding.strip().lower() != "chunked":
                raise http.Refusal("502 Bad Gateway", f"the upstream sent {coding!r} coding")
            async for piece in stream.rechunk(upstream, mask):
                await self.send(piece)
            return not close
        if length:
            if not length.isdigit():
                raise http.Refusal("502 Bad Gateway", "the upstream sent a bad Content-Length")
            left = int(length)
            while left:
                data = await upstream.some(min(left, stream.READ))
                left -= len(data)
                await self.send(mask.feed(data))
            await self.send(mask.flush())
            return not close
        with contextlib.suppress(EOFError):  # the body ends when the upstream closes
            while True:
                await self.send(mask.feed(await upstream.some()))
        await self.send(mask.flush())
        return False


async def shut(writer: asyncio.StreamWriter) -> None:
    """Close gently (TLS close_notify) for a moment, then for good: the proxy closes the
    socket next, and no transport may still watch its descriptor then."""
    writer.close()
    try:
        async with asyncio.timeout(CLOSE_S):
            await writer.wait_closed()
    except Exception:  # noqa: BLE001, S110 - a peer gone or slow: the abort below ends it
        pass
    finally:
        # A TLS transport that already lost its connection has no protocol left to abort
        # (Python 3.11.2 then raises AttributeError): it is closed, which is the aim.
        with contextlib.suppress(AttributeError):
            writer.transport.abort()


def ended(reason: str) -> http.Refusal:
    return http.Refusal("", reason)


def _response_head(head: bytes) -> tuple[int, list[tuple[str, str]]]:
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0") or not parts[1].isdigit():
        raise http.Refusal("502 Bad Gateway", "the upstream sent a malformed status line")
    fields = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise http.Refusal("502 Bad Gateway", "the upstream sent a malformed header line")
        fields.append((name.decode("latin-1").lower(), value.strip().decode("latin-1")))
    return int(parts[1]), fields


def _field(fields: list[tuple[str, str]], name: str) -> str:
    return ", ".join(value for key, value in fields if key == name)
