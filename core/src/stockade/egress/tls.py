"""A peek inside a CONNECT tunnel: the name a TLS ClientHello asks for, without decrypting.

A CONNECT to an allowed host followed by TLS for another name (SNI) reaches whatever that
address serves under the other name: domain fronting on a shared front end. The proxy reads
the client's first bytes in every tunnel, and :func:`read_client_hello` parses the
ClientHello from them (RFC 8446 4.1.2, RFC 6066 3): the records may arrive split over many
TCP segments and the handshake message over several records; everything is bounded
(:data:`HELLO_LIMIT` bytes). :func:`verdict` then says whether the tunnel may carry it:

- the server name must be the CONNECT host (case and a trailing dot aside);
- a ClientHello without a server name is refused for a named host (a front end would pick a
  default site) and accepted for a literal IP, where clients send none;
- Encrypted Client Hello (and the draft ESNI) is refused: it hides the real name;
- bytes that begin like a TLS record but do not parse as one ClientHello are refused.

A server may answer with a HelloRetryRequest, and the client then sends a second
ClientHello that a front end could route by: :class:`HandshakeWatch` follows the
handshake's records until the server's first message, and holds a second ClientHello to the
same verdict.

What a tunnel carries when its first byte is not a TLS record type is the proxy's call
(:mod:`stockade.egress.proxy`: refused on port 443, relayed elsewhere).

Why by hand: the standard library's ``ssl`` parses a ClientHello only as a server inside a
handshake (``sni_callback``), with OpenSSL's own refusals mixed in, and says nothing about
ECH; the libraries that parse TLS records (tlslite-ng, scapy, dpkt) bring a whole TLS or
packet stack for what is a hundred lines of length-prefixed fields here, fuzzed in
``core/tests/test_egress_tls.py``.
"""

from __future__ import annotations

from attrs import frozen

from .rules import literal_ip, normalize

__all__ = [
    "ALERT_ACCESS_DENIED",
    "HELLO_LIMIT",
    "ClientHello",
    "HandshakeWatch",
    "NotHello",
    "read_client_hello",
    "verdict",
]

HELLO_LIMIT = 64 * 1024  # bytes of records the proxy gathers for one ClientHello
RECORD_LIMIT = 1 << 14  # the largest plaintext record (RFC 8446 5.1)
_HANDSHAKE = 22
_CLIENT_HELLO = 1
_SERVER_NAME = 0
_ECH = (0xFE0D, 0xFFCE)  # encrypted_client_hello; the draft encrypted_server_name
# The random of a HelloRetryRequest (RFC 8446 4.1.3): a second ClientHello follows it.
HRR_RANDOM = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")
# A fatal access_denied alert: what the client's TLS library reports when its tunnel is refused.
ALERT_ACCESS_DENIED = bytes((21, 3, 3, 0, 2, 2, 49))


class NotHello(Exception):
    """The bytes are not one well-formed TLS ClientHello; ``str()`` says why."""


@frozen
class ClientHello:
    """What the proxy needs from a ClientHello.

    Attributes:
        server_name: the ``host_name`` of its server_name extension, or None without one.
        ech: whether it carries Encrypted Client Hello (or the draft ESNI).
        size: bytes of records it took, headers included.
    """

    server_name: str | None
    ech: bool
    size: int


def looks_like_tls(first: int) -> bool:
    """Whether a first byte is a TLS record type (change_cipher_spec .. heartbeat).

    Some servers skip a warning alert or accept any record version before the handshake, so
    every TLS record type counts, not only a handshake with the usual version.
    """
    return 20 <= first <= 24


def read_client_hello(data: bytes) -> ClientHello | None:
    """The ClientHello at the start of ``data``, or None while more bytes are needed.

    Raises:
        NotHello: a record other than a handshake, a bad record, a first message other than
            a ClientHello, bytes after it in its records, malformed fields, or over
            :data:`HELLO_LIMIT` bytes.
    """
    message = bytearray()
    at = 0
    while len(data) - at >= 5:
        kind, major, minor = data[at], data[at + 1], data[at + 2]
        length = int.from_bytes(data[at + 3 : at + 5], "big")
        if kind != _HANDSHAKE:
            raise NotHello(f"a TLS record of type {kind} before the ClientHello")
        if major != 3 or minor > 4:
            raise NotHello(f"TLS record version {major}.{minor}")
        if not 0 < length <= RECORD_LIMIT:
            raise NotHello(f"a TLS record of {length} bytes")
        if len(data) - at - 5 < length:
            break
        message += data[at + 5 : at + 5 + length]
        at += 5 + length
        if len(message) < 4:
            continue
        if message[0] != _CLIENT_HELLO:
            raise NotHello(
                f"the first handshake message is of type {message[0]}, not a ClientHello"
            )
        size = int.from_bytes(message[1:4], "big")
        if size > HELLO_LIMIT:
            raise NotHello(f"a ClientHello of {size} bytes, over {HELLO_LIMIT}")
        if len(message) > 4 + size:
            raise NotHello("more handshake bytes after the ClientHello in its record")
        if len(message) == 4 + size:
            name, ech = _parse(bytes(message[4:]))
            return ClientHello(name, ech, at)
    if len(data) > HELLO_LIMIT:
        raise NotHello(f"no whole ClientHello in {HELLO_LIMIT} bytes")
    return None


class _Reader:
    """Length-prefixed fields, front to back; a short read is a malformed hello."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    @property
    def left(self) -> int:
        return len(self.data) - self.at

    def take(self, n: int) -> bytes:
        if n > self.left:
            raise NotHello("a ClientHello field runs past its end")
        self.at += n
        return self.data[self.at - n : self.at]

    def number(self, width: int) -> int:
        return int.from_bytes(self.take(width), "big")

    def vector(self, width: int) -> _Reader:
        return _Reader(self.take(self.number(width)))


def _parse(body: bytes) -> tuple[str | None, bool]:
    hello = _Reader(body)
    hello.take(2 + 32)  # legacy_version, random
    if hello.vector(1).left > 32:
        raise NotHello("a session id over 32 bytes")
    suites = hello.vector(2).left
    if suites == 0 or suites % 2:
        raise NotHello(f"cipher suites of {suites} bytes")
    if hello.vector(1).left == 0:
        raise NotHello("no compression methods")
    if hello.left == 0:
        return None, False  # no extensions at all (TLS 1.2 allows it): no name
    extensions = hello.vector(2)
    if hello.left:
        raise NotHello("bytes after the ClientHello's extensions")
    seen: set[int] = set()
    name = None
    while extensions.left:
        kind = extensions.number(2)
        data = extensions.vector(2)
        if kind in seen:
            raise NotHello(f"extension {kind} twice")
        seen.add(kind)
        if kind == _SERVER_NAME:
            name = _server_name(data)
    return name, any(kind in seen for kind in _ECH)


def _server_name(data: _Reader) -> str:
    names = data.vector(2)
    kind = names.number(1)
    name = names.vector(2)
    if data.left or names.left or kind != 0 or not name.left:
        raise NotHello("a server_name extension must hold exactly one host name")
    found = name.take(name.left)
    try:
        return found.decode("ascii")
    except UnicodeDecodeError:
        raise NotHello("a server name that is not ASCII") from None


def verdict(hello: ClientHello, host: str) -> str | None:
    """Why a tunnel opened for ``host`` (normalized) must not carry ``hello``, or None."""
    if hello.ech:
        return (
            "the ClientHello uses Encrypted Client Hello, which hides the name it asks for; "
            "stockade checks that name, so turn ECH off for this client"
        )
    if hello.server_name is None:
        if literal_ip(host) is not None:
            return None
        return f"the ClientHello names no server (no SNI) in a tunnel to {host}"
    if normalize(hello.server_name) != host:
        return (
            f"the ClientHello asks for {hello.server_name[:120]!r} (SNI) in a tunnel to {host}; "
            "a tunnel carries TLS only for the host it was opened for"
        )
    return None


class HandshakeWatch:
    """After a tunnel's first ClientHello: no second one unless the server asked, and then
    only for the same name.

    A server answers a ClientHello with a HelloRetryRequest when it wants another key share;
    the client then sends a second ClientHello, which a front end may route by. So until the
    server's first handshake message is seen (:meth:`down`), the client may send only
    change_cipher_spec, alert and (0-RTT) application data records; after a
    HelloRetryRequest, the next handshake record must be a ClientHello that passes
    :func:`verdict` (:meth:`up`). After a plain ServerHello (or anything else the server
    sends) later handshake records are encrypted and the watch ends (:attr:`done`).
    """

    def __init__(self, host: str) -> None:
        self.host = host
        self.done = False
        self._retry = False  # the server asked for a second ClientHello
        self._held = bytearray()  # client bytes not yet passed: a header, or a handshake record
        self._skip = 0  # bytes left of a client record that passes without a look
        self._hello = bytearray()  # the second ClientHello's records so far
        self._server = bytearray()  # the server's first bytes, until its first message is known

    @property
    def idle(self) -> bool:
        """Whether the watch has ended and holds nothing: bytes pass untouched."""
        return self.done and not self._held

    def up(self, data: bytes) -> bytes:
        """The part of the client's ``data`` that may go upstream now; refuse with NotHello."""
        if self.done and not self._held:
            return data
        self._held += data
        out = bytearray()
        while self._held and not self.done:
            if self._skip:
                take = min(self._skip, len(self._held))
                out += self._held[:take]
                del self._held[:take]
                self._skip -= take
                continue
            if len(self._held) < 5:
                break
            kind = self._held[0]
            length = int.from_bytes(self._held[3:5], "big")
            if kind in (20, 21, 23) and length <= RECORD_LIMIT + 256:
                out += self._held[:5]
                del self._held[:5]
                self._skip = length
                continue
            if kind != _HANDSHAKE:
                raise NotHello(f"a TLS record of type {kind} during the handshake")
            if not self._retry:
                raise NotHello("a second handshake message before the server answered")
            if len(self._held) < 5 + length:
                break
            self._hello += self._held[: 5 + length]
            out += self._held[: 5 + length]
            del self._held[: 5 + length]
            self._second_hello()
        if self.done:
            out += self._held
            self._held.clear()
        return bytes(out)

    def _second_hello(self) -> None:
        hello = read_client_hello(bytes(self._hello))
        if hello is None:
            return
        why = verdict(hello, self.host)
        if why is not None:
            raise NotHello(f"the second ClientHello (after a HelloRetryRequest): {why}")
        self.done = True

    def down(self, data: bytes) -> None:
        """Watch the server's bytes until its first handshake message says what comes next."""
        if self.done or self._retry:
            return
        self._server += data[:4096]
        records = bytes(self._server)
        message = bytearray()
        at = 0
        while len(records) - at >= 5 and len(message) < 38:
            if records[at] != _HANDSHAKE:
                self.done = True  # an alert or not TLS: the server ends it
                return
            length = int.from_bytes(records[at + 3 : at + 5], "big")
            message += records[at + 5 : at + 5 + length]
            at += 5 + length
        if len(message) >= 38:
            self._retry = message[0] == 2 and message[6:38] == HRR_RANDOM
            self.done = not self._retry
        elif len(self._server) >= 4096:
            self.done = True  # no ServerHello in 4 KiB: nothing a front end would route by
