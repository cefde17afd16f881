"""Credential injection: the command holds a placeholder, the proxy puts the secret in.

A profile binds a credential's handle to a host and a header
(:class:`~stockade.request.spec.CredentialBinding`). The command that asks for it gets a
random :func:`placeholder` in its variable, never the value. Its egress proxy terminates TLS
for the bound host only, with a leaf from the command's own authority
(:mod:`stockade.egress.ca`), opens its own verified TLS connection upstream, and relays
HTTP/1.1 request by request (:class:`Injector`):

- each request must be in origin form, for the bound host (its one ``Host``), no Upgrade,
  its framing unambiguous (checked before its head goes upstream);
- in the bound header, a value that holds the placeholder (as it is, or inside a basic
  auth header's base64) is replaced whole by the binding's value (``Bearer <secret>``);
- the placeholder anywhere else, in the target, another header (or its name) or the body,
  and any other binding's placeholder, refuses the request: ``403`` inside the tunnel, and
  the connection's record names the handle and the host;
- ``Accept-Encoding`` becomes ``identity``, and a response with a ``Content-Encoding``
  is refused (``502``): a compressed body could not be scrubbed;
- a ranged request (``Range``, ``If-Range``) is refused (``403``), and so is a partial
  response (``206``, ``Content-Range``: ``502``): each piece is masked whole, so halves of
  the secret in two pieces would each pass;
- every response's head and body go through a :class:`~stockade.egress.stream.Mask` of
  every form of every injected secret (:func:`stockade.record.redact.secret_forms`) and
  every percent-encoding and mixed-case hex of it (:func:`encodings`), across TLS records,
  chunks and the head, so an upstream that echoes the header back echoes a masked one.

Requests to any other host keep the plain CONNECT tunnel of :mod:`stockade.egress.proxy`.
Plain-HTTP requests (forwarded, or in an HTTP tunnel's CONNECT head) are screened
(:meth:`Injector.screen`): one that carries a placeholder is refused. What a TLS tunnel to
another host carries cannot be seen, so a placeholder sent there is not refused; it is
worth nothing there, since only this proxy turns it into the secret, for the bound host.

Why by hand: the request and response handling is small and must be exactly this policy;
a MITM proxy library (mitmproxy) would bring its own CA store, HTTP/2 and addons to bend.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import socket
import ssl
import string
from collections.abc import Callable, Sequence

from attrs import frozen

from ..record.redact import secret_forms
from ..request.spec import CredentialBinding
from . import ca, http, stream
from .echoes import Pieces, encodings
from .relay import Gate, TunnelRefused
from .rules import parse_hosts, show
from .session import RESPONSE_HEAD_LIMIT, Facts, Session, ended, shut

__all__ = ["Injection", "Injector", "encodings", "placeholder"]

HANDSHAKE_S = 10.0
MIN_SECRET = 8  # a shorter secret is refused: its forms would match by chance
_ALNUM = string.ascii_letters + string.digits
_PREFIX = re.compile(r"[A-Za-z0-9]{1,8}[_-]")


def placeholder(value: str) -> str:
    """A random stand-in for ``value``: its type prefix kept (``ghp_``, ``sk-``, so tools
    that check the shape accept it), then at least 32 random letters and digits."""
    found = _PREFIX.match(value)
    prefix = found.group() if found else "stockade_"
    size = max(len(value) - len(prefix), 32)
    return prefix + "".join(secrets.choice(_ALNUM) for _ in range(size))


@frozen
class Injection:
    """One credential the proxy injects: where, the value, and the command's placeholder."""

    variable: str
    handle: str
    host: str
    port: int
    header: str  # lower-case
    rendered: str  # the header's value, secret in place
    value: str
    placeholder: str

    @classmethod
    def make(
        cls, variable: str, handle: str, binding: CredentialBinding, value: str, stand_in: str
    ) -> Injection:
        """An injection from a binding, the command holding ``stand_in`` (a
        :func:`placeholder`); refuses a value too short or unfit for a header."""
        [rule] = parse_hosts([binding.host])
        if len(value) < MIN_SECRET or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise ValueError(
                f"the credential {handle!r} is under {MIN_SECRET} characters or holds a "
                "control character: it cannot be injected into a header"
            )
        rendered = binding.render(value)
        header = binding.header.lower()
        return cls(variable, handle, rule.host, rule.port, header, rendered, value, stand_in)


class Injector:
    """One command's injections: which tunnels it terminates, and what it screens."""

    def __init__(
        self, injections: Sequence[Injection], folder: str, upstream_ca: str | None
    ) -> None:
        self.injections = tuple(injections)
        self.targets = {(i.host, i.port) for i in self.injections}
        self.authority = ca.RunAuthority([i.host for i in self.injections], folder)
        self.upstream = ca.upstream_context(upstream_ca)
        self._placeholders = [
            (i, [f.encode() for f in secret_forms(i.placeholder)]) for i in self.injections
        ]
        self.secrets = [f.encode() for i in self.injections for f in secret_forms(i.value)]
        self.patterns = [p for i in self.injections for p in encodings(i.value)]
        self.pieces = Pieces(i.value for i in self.injections)

    def terminates(self, host: str, port: int) -> bool:
        """Whether a tunnel to ``host:port`` is one this proxy injects into."""
        return (host, port) in self.targets

    def carried(self, data: bytes) -> Injection | None:
        """The injection whose placeholder (in any form) ``data`` holds, if any."""
        for injection, forms in self._placeholders:
            if any(form in data for form in forms):
                return injection
        return None

    def refuse(
        self, found: Injection, where: str, host: str, port: int, *, plain: bool = False
    ) -> http.Refusal:
        # Over plain HTTP the value would travel in the clear: it is never put in there.
        how = " over plain HTTP, where it is never put in (use https://)" if plain else ""
        return http.Refusal(
            "403 Forbidden",
            f"the request to {show(host, port)} carries the placeholder of credential "
            f"{found.handle!r} ({found.variable}) in {where}{how}; stockade puts that "
            f"credential only into the {found.header} header of HTTPS requests to "
            f"{show(found.host, found.port)}",
        )

    def screen(self, request: http.Request, host: str, port: int) -> Callable[[bytes], None]:
        """Refuse a request head (forwarded, or a CONNECT) that carries a placeholder; the
        returned check refuses a body that does, fed piece by piece."""
        plain = request.method != "CONNECT"
        if (found := self.carried(request.target.encode("latin-1"))) is not None:
            raise self.refuse(found, "its target (the URL)", host, port, plain=plain)
        for name, value in request.headers:
            if (found := self.carried(f"{name}:{value}".encode("latin-1"))) is not None:
                raise self.refuse(found, f"the {name} header", host, port, plain=plain)
        return self.body_check(host, port, plain=plain)

    def screen_tunnel(self, first: bytes, gate: Gate | None, host: str, port: int) -> Gate:
        """The up gate of a plain tunnel to another host, which also refuses a placeholder
        in its bytes (``first`` included): seen only where they are in the clear, as in
        HTTP inside the tunnel; TLS hides it."""
        check = self.body_check(host, port)

        def screen(data: bytes | memoryview) -> None:
            try:
                check(bytes(data))
            except http.Refusal as refused:
                raise TunnelRefused(refused.reason, alert=False, status=refused.status) from None

        def screened(data: memoryview) -> bytes | memoryview:
            out = data if gate is None else gate(data)
            screen(out)
            return out

        screen(first)  # it passed ``gate`` already
        return screened

    def body_check(self, host: str, port: int, *, plain: bool = False) -> Callable[[bytes], None]:
        longest = max((len(f) for _, forms in self._placeholders for f in forms), default=1)
        carry = b""

        def check(data: bytes) -> None:
            nonlocal carry
            window = carry + data
            if (found := self.carried(window)) is not None:
                raise self.refuse(found, "its body", host, port, plain=plain)
            carry = window[-(longest - 1) :] if longest > 1 else b""

        return check

    async def serve(
        self,
        loop: asyncio.AbstractEventLoop,
        client: socket.socket,
        upstream: socket.socket,
        rest: bytes,
        facts: Facts,
        *,
        again: Callable[[], None] = lambda: None,
    ) -> None:
        """Terminate the client's TLS, open a verified one upstream, relay request by request;
        ``again`` is called before each request and each piece of a body goes upstream (the
        breaker, asked again: it refuses by raising :class:`~stockade.egress.http.Refusal`).

        Raises:
            Refusal: the handshake failed, or a request was refused (the client got a
                ``403``/``502`` inside the tunnel first when it could); its status is empty,
                since the tunnel's TLS is this module's: the proxy only records it.
        """
        host, port = facts.host, facts.port
        if rest:
            raise TunnelRefused("the client sent bytes before the tunnel was open", alert=False)
        context = self.authority.server_context(host)
        reader = asyncio.StreamReader(limit=RESPONSE_HEAD_LIMIT, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol,
                client,
                ssl=context,
                ssl_handshake_timeout=HANDSHAKE_S,
            )
        except (OSError, ssl.SSLError, TimeoutError) as err:
            raise ended(
                f"the TLS handshake with the client for {show(host, port)} failed ({err}); a "
                "client must trust the run's authority (SSL_CERT_FILE and the other CA "
                "variables name it), or ask for this host by its name (SNI)"
            ) from None
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        session = Session(self, stream.Source(reader), writer, facts, again)
        try:
            try:
                up_reader, up_writer = await asyncio.open_connection(
                    sock=upstream,
                    ssl=self.upstream,
                    server_hostname=host,
                    ssl_handshake_timeout=HANDSHAKE_S,
                    limit=RESPONSE_HEAD_LIMIT,
                )
            except (OSError, ssl.SSLError, TimeoutError) as err:
                why = f"the TLS connection to {show(host, port)} failed: {err}"
                await session.answer("502 Bad Gateway", why)
                raise ended(why) from None
            try:
                await session.run(stream.Source(up_reader), up_writer)
            finally:
                await shut(up_writer)
        finally:
            facts.reason += session.summary()
            await shut(writer)
