"""The requests a sandboxed command sends its egress proxy, parsed strictly: valid, or refused.

The proxy reads one request head per connection. :func:`parse_head` accepts only what
RFC 9112 calls well-formed and nothing a lenient reader might take two ways: lines end in
CRLF (a bare CR or LF anywhere is refused, so a value cannot smuggle a second header line),
no NUL or other control character but a tab in a value, no line folding, no space before a
header's colon, token names, at most :data:`MAX_HEADERS` fields. :func:`connect_target` and
:func:`forward_target` read the request target without ``urllib`` (which raises ``ValueError``
on ``http://[zz/``): a host is a DNS name a rule could name or an IP literal, a port is
1-65535, and user info, fragments and percent-signs in the authority are refused.

A plain HTTP request carries exactly one body, framed by ``Content-Length`` or chunked
``Transfer-Encoding`` (never both: a smuggling shape) and checked by :class:`BodyReader` as it
streams, so the upstream receives one request whose ``Host`` the proxy wrote; bytes after it
are dropped. Plain HTTP inside a CONNECT tunnel (:func:`request_line_kind` tells it from
other protocols) goes through :class:`TunnelHttp`: the same checks, request by request, each
``Host`` naming the tunnel's host. Every refusal is a :class:`Refusal` (a status and a
reason an agent can act on); the parser raises nothing else, which
``core/tests/test_egress_http.py`` and ``core/tests/test_egress_tunnel_http.py`` fuzz.
"""

from __future__ import annotations

import re

from attrs import frozen

from .rules import HTTP_PORT, literal_ip, normalize, show, valid_name

__all__ = [
    "BadRequest",
    "BodyReader",
    "Refusal",
    "Request",
    "body_reader",
    "check_host_header",
    "check_in_tunnel",
    "check_partial",
    "connect_target",
    "forward_head",
    "forward_target",
    "parse_head",
]

MAX_HEADERS = 100  # header fields in one request head (more: 431)
LINE_LIMIT = 4096  # bytes of one chunk-size line
SHOWN = 120  # characters of a bad line a reason quotes

_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
_TARGET = re.compile(rb"[\x21-\x7e]+\Z")  # visible ASCII: no space, no control, no 8-bit
_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*\Z")  # field-vchar, SP, HTAB, obs-text
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})(?:[ \t]*;[\t\x20-\x7e\x80-\xff]*)?\Z")
_DIGITS = re.compile(r"[0-9]{1,15}\Z")
# Hop-by-hop fields the proxy drops (it writes its own Host and Connection).
_HOP_BY_HOP = frozenset(("connection", "keep-alive", "te", "trailer", "upgrade", "host"))
# Fields whose removal would change how the upstream frames the request.
_FRAMING = frozenset(("content-length", "transfer-encoding", "host"))


class Refusal(Exception):
    """The proxy refuses the attempt: ``status`` (``"400 Bad Request"``) and ``reason``."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class BadRequest(Refusal):
    """A malformed request: 400, or ``status`` (431 for a head too large)."""

    def __init__(self, reason: str, status: str = "400 Bad Request") -> None:
        super().__init__(status, reason)


def _quote(raw: bytes | str) -> str:
    text = raw.decode("latin-1") if isinstance(raw, bytes) else raw
    return repr(text[:SHOWN]) + ("..." if len(text) > SHOWN else "")


@frozen
class Request:
    """One parsed request head.

    Attributes:
        method: the method, case as sent (``CONNECT`` is upper-case only).
        target: the request target, visible ASCII.
        version: ``HTTP/1.1`` or ``HTTP/1.0``.
        headers: the fields in order, names as sent, values without surrounding blanks.
    """

    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]

    def serialize(self) -> bytes:
        """The head as bytes, ending with its blank line: parses back to this request."""
        lines = [f"{self.method} {self.target} {self.version}"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def values(self, name: str) -> list[str]:
        """The values of every field called ``name`` (any case), in order."""
        return [v for n, v in self.headers if n.lower() == name]


def check_partial(data: bytes | bytearray, start: int = 0, end: int | None = None) -> None:
    """Refuse a head as it arrives: a NUL, a bare LF, or a CR not followed by LF.

    Only ``data[start:end]`` is checked (the bytes just read; the byte before ``start`` is
    consulted), so a head read in many pieces costs its length once.
    """
    end = len(data) if end is None else end
    if data.find(b"\0", start, end) >= 0:
        raise BadRequest("a NUL byte in the request head")
    bare = "a bare CR or LF in the request head: lines end in CRLF, and a value has no breaks"
    at = start
    while (at := data.find(b"\n", at, end)) >= 0:
        if at == 0 or data[at - 1] != 0x0D:
            raise BadRequest(bare)
        at += 1
    at = start
    while (at := data.find(b"\r", at, end)) >= 0:
        if at + 1 < end and data[at + 1] != 0x0A:  # a CR at the end may be half a CRLF
            raise BadRequest(bare)
        at += 1


def parse_head(head: bytes) -> Request:
    """Parse a request head (the bytes before its blank line), or raise :class:`BadRequest`."""
    check_partial(head)
    if head.endswith(b"\r"):
        raise BadRequest("a bare CR at the end of the request head")
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or not _TARGET.match(parts[1]):
        raise BadRequest(f"malformed request line {_quote(lines[0])}")
    method, target, version = (p.decode("ascii", "replace") for p in parts)
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadRequest(f"unsupported protocol {_quote(version)}: send HTTP/1.1")
    if len(lines) - 1 > MAX_HEADERS:
        raise BadRequest(
            f"{len(lines) - 1} header fields, over {MAX_HEADERS}",
            "431 Request Header Fields Too Large",
        )
    return Request(method, target, version, tuple(_header(line) for line in lines[1:]))


def _header(line: bytes) -> tuple[str, str]:
    if line[:1] in (b" ", b"\t"):
        raise BadRequest(f"a folded header line {_quote(line)} (obs-fold is not accepted)")
    name, colon, value = line.partition(b":")
    if not colon:
        raise BadRequest(f"malformed header line {_quote(line)}: no colon")
    if not _TOKEN.match(name):
        raise BadRequest(f"bad header name {_quote(name)} (a token, no space before the colon)")
    value = value.strip(b" \t")
    if not _VALUE.match(value):
        raise BadRequest(f"a control character in the value of header {_quote(name)}")
    return name.decode("ascii"), value.decode("latin-1")


def _split_authority(authority: str, default: int | None, what: str) -> tuple[str, int]:
    """``host[:port]`` as (normalized host, port); the host a valid name or an IP literal."""
    if any(c in authority for c in "@%\\"):
        raise BadRequest(f"{what} {_quote(authority)}: no user info or escapes in a host")
    if authority.startswith("["):
        close = authority.find("]")
        host, rest = authority[1:close], authority[close + 1 :]
        if close < 0 or (rest and not rest.startswith(":")) or ":" not in host:
            raise BadRequest(f"malformed {what} {_quote(authority)}")
        port_text = rest[1:] if rest else None
    elif ":" in authority:
        host, _, port_text = authority.partition(":")
    else:
        host, port_text = authority, None
    if port_text is None:
        if default is None:
            raise BadRequest(f"CONNECT needs host:port, got {_quote(authority)}")
        port = default
    elif _DIGITS.match(port_text) and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise BadRequest(f"bad port in {what} {_quote(authority)}: a number from 1 to 65535")
    name = normalize(host)
    if not name or (literal_ip(name) is None and not valid_name(name)):
        raise BadRequest(f"{what} {_quote(authority)} does not name a valid host")
    return name, port


def connect_target(target: str) -> tuple[str, int]:
    """A CONNECT target (``host:port``) as (normalized host, port)."""
    return _split_authority(target, None, "CONNECT target")


def forward_target(target: str) -> tuple[str, int, str]:
    """An absolute ``http://`` target as (normalized host, port, origin-form path)."""
    if target[:7].lower() != "http://":
        why = (
            "send https:// requests with CONNECT"
            if target[:8].lower() == "https://"
            else "this is a proxy: send CONNECT host:port or an absolute http:// URL"
        )
        raise BadRequest(f"{why} (got {_quote(target)})")
    rest = target[7:]
    if "#" in rest:
        raise BadRequest(f"a fragment in the request target {_quote(target)}")
    end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, path = rest[:end], rest[end:]
    if not authority:
        raise BadRequest(f"no host in {_quote(target)}")
    host, port = _split_authority(authority, HTTP_PORT, "host")
    return host, port, path if path.startswith("/") else "/" + path


def check_host_header(request: Request, host: str, port: int) -> None:
    """Refuse a ``Host`` that is missing (HTTP/1.1), repeated, or names another host:port.

    Raises:
        BadRequest: no ``Host`` in HTTP/1.1, several, or one that is not ``host[:port]``.
        Refusal: ``403 Forbidden``, the ``Host`` names another host than the target.
    """
    values = request.values("host")
    if not values:
        if request.version == "HTTP/1.1":
            raise BadRequest("an HTTP/1.1 request needs a Host header")
        return
    if len(values) > 1:
        raise BadRequest(f"{len(values)} Host headers: send exactly one")
    named = _split_authority(values[0], HTTP_PORT, "Host header")
    if named != (host, port):
        raise Refusal(
            "403 Forbidden",
            f"the Host header names {_quote(values[0])} but the request is for "
            f"{show(host, port)}; "
            "stockade forwards a request only to the host it names in both",
        )


def forward_head(request: Request, path: str, host: str, port: int) -> bytes:
    """The request as the origin sees it: origin-form path, its own Host, no Proxy-* headers.

    Raises:
        BadRequest: ``Connection`` names a field that frames the request (Content-Length,
            Transfer-Encoding, Host): dropping it would desynchronise the upstream.
    """
    named = {
        token.strip().lower()
        for value in request.values("connection")
        for token in value.split(",")
    }
    if named & _FRAMING:
        raise BadRequest(f"Connection names {', '.join(sorted(named & _FRAMING))}: not accepted")
    authority = f"[{host}]" if ":" in host else host
    if port != HTTP_PORT:
        authority += f":{port}"
    headers = [("Host", authority)]
    for name, value in request.headers:
        lower = name.lower()
        if not (lower.startswith("proxy-") or lower in _HOP_BY_HOP or lower in named):
            headers.append((name, value))
    headers.append(("Connection", "close"))
    return Request(request.method, path, "HTTP/1.1", tuple(headers)).serialize()


class BodyReader:
    """Splits what follows a request head into its body and what comes after, validating.

    :meth:`feed` returns the bytes that belong to the body (forwarded as sent: a chunked body
    stays chunked) and, once the body is complete, :attr:`done` is true and everything else
    fed is the excess (a pipelined request the proxy drops). A bad chunk or trailer raises
    :class:`BadRequest`.
    """

    def __init__(self, *, length: int = 0, chunked: bool = False) -> None:
        self.chunked = chunked
        self._left = 0 if chunked else length  # bytes of data left in this chunk / the body
        self._state = "size" if chunked else "data"
        self._line = bytearray()  # a chunk-size or trailer line being gathered
        self._trailer = 0  # bytes of trailer seen
        self.excess = 0
        self.done = not chunked and length == 0

    def feed(self, data: bytes) -> bytes:
        """The part of ``data`` that belongs to the body; the rest is counted as excess."""
        if self.done:
            self.excess += len(data)
            return b""
        at = 0
        while at < len(data) and not self.done:
            at = self._step(data, at)
        self.excess += len(data) - at
        return data[:at]

    def _step(self, data: bytes, at: int) -> int:
        if self._state == "data":
            take = min(self._left, len(data) - at)
            self._left -= take
            if self._left == 0:
                self._state = "crlf" if self.chunked else "end"
                self.done = not self.chunked
            return at + take
        if self._state == "crlf":
            return self._expect_crlf(data, at)
        end = data.find(b"\n", at)
        stop = len(data) if end < 0 else end + 1
        self._line += data[at:stop]
        limit = LINE_LIMIT if self._state == "size" else MAX_HEADERS * LINE_LIMIT
        if len(self._line) > limit or self._trailer + len(self._line) > limit:
            raise BadRequest(f"a chunk {self._state} line over {limit} bytes")
        if end >= 0:
            line, self._line = bytes(self._line), bytearray()
            self._line_done(line)
        return stop

    def _expect_crlf(self, data: bytes, at: int) -> int:
        want = b"\r\n"[len(self._line) :]
        got = data[at : at + len(want)]
        if not want.startswith(got):
            raise BadRequest("a chunk's data is not followed by CRLF")
        self._line += got
        if len(self._line) == 2:
            self._line = bytearray()
            self._state = "size"
        return at + len(got)

    def _line_done(self, line: bytes) -> None:
        if not line.endswith(b"\r\n") or b"\r" in line[:-2] or b"\0" in line:
            raise BadRequest("a bare CR or LF in a chunked body")
        line = line[:-2]
        if self._state == "trailer":
            self._trailer += len(line) + 2
            if not line:
                self.done = True
                self._state = "end"
            else:
                _header(line)
            return
        found = _CHUNK_SIZE.match(line)
        if found is None:
            raise BadRequest(f"a bad chunk size line {_quote(line)}")
        self._left = int(found.group(1), 16)
        self._state = "data" if self._left else "trailer"


def body_reader(request: Request) -> BodyReader:
    """The reader of this request's body, from its framing fields; refuse any ambiguity."""
    lengths = request.values("content-length")
    codings = request.values("transfer-encoding")
    if lengths and codings:
        raise BadRequest("both Content-Length and Transfer-Encoding: send one")
    if codings:
        names = [c.strip().lower() for value in codings for c in value.split(",")]
        if request.version != "HTTP/1.1" or names != ["chunked"]:
            raise BadRequest(
                f"Transfer-Encoding {_quote(', '.join(codings))}: only chunked, in HTTP/1.1"
            )
        return BodyReader(chunked=True)
    if lengths:
        numbers = {n.strip() for value in lengths for n in value.split(",")}
        if len(numbers) != 1 or not _DIGITS.match(next(iter(numbers))):
            raise BadRequest(f"Content-Length {_quote(', '.join(lengths))}: one number")
        return BodyReader(length=int(numbers.pop()))
    return BodyReader()


HEAD_LIMIT = 16 * 1024  # bytes of one request head inside a tunnel (as the proxy's own limit)


def request_line_kind(data: bytes) -> bool | None:
    """Whether ``data`` begins like an HTTP request: True, False, or None while undecided.

    Decided on the side of HTTP, since lenient servers take much: any first line (up to the
    first LF) naming ``HTTP/`` in any case is HTTP, and the strict parser refuses it if it
    is not well-formed. A first byte that cannot start a method, or a first line without
    ``HTTP/``, is another protocol.
    """
    if not _TOKEN.match(data[:1]):
        return False
    newline = data.find(b"\n")
    line = data if newline < 0 else data[:newline]
    if b"http/" in line.lower():
        return True
    if newline >= 0:
        return False
    return True if len(data) > HEAD_LIMIT else None


class TunnelHttp:
    """The requests inside a plain-HTTP tunnel, one after another, each one for its host.

    A tunnel that begins with an HTTP request line carries HTTP, so each request in it is
    parsed as strictly as a forwarded one and its ``Host`` must name the tunnel's host (and
    its port, or none). A request in absolute form, a CONNECT, or an ``Upgrade`` (to a
    protocol the proxy cannot read) is refused. :meth:`feed` returns what may go upstream:
    each checked head (as parsed, re-serialised) and its body, as it streams.
    """

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._head = bytearray()
        self._body: BodyReader | None = None

    def feed(self, data: bytes) -> bytes:
        """The part of ``data`` that may go upstream; a refused request raises Refusal."""
        out = bytearray()
        while data:
            if self._body is not None:
                part = self._body.feed(data)
                out += part
                data = data[len(part) :] if self._body.done else b""
                if self._body.done:
                    self._body = None
                continue
            old = len(self._head)
            self._head += data
            end = self._head.find(b"\r\n\r\n", max(0, old - 3))
            check_partial(self._head, max(0, old - 1), None if end < 0 else end)
            if end < 0:
                if len(self._head) > HEAD_LIMIT:
                    raise BadRequest(
                        f"a request head in the tunnel is over {HEAD_LIMIT} bytes",
                        "431 Request Header Fields Too Large",
                    )
                break
            request = parse_head(bytes(self._head[:end]))
            data = bytes(self._head[end + 4 :])
            self._head = bytearray()
            self._check(request)
            out += request.serialize()
            reader = body_reader(request)
            self._body = None if reader.done else reader
        return bytes(out)

    def _check(self, request: Request) -> None:
        check_in_tunnel(request, self.host, self.port)


def check_in_tunnel(request: Request, host: str, port: int) -> None:
    """Refuse a request inside a tunnel to ``host:port`` that is not for it, in origin form:
    absolute form, CONNECT, Upgrade, or a ``Host`` (exactly one) naming another host."""
    if request.method == "CONNECT" or not (request.target.startswith("/") or request.target == "*"):
        raise BadRequest(
            f"{request.method} {_quote(request.target)} inside a tunnel: send origin-form "
            "requests (GET /path) for the tunnel's own host"
        )
    if request.values("upgrade"):
        raise BadRequest(
            "an Upgrade inside a plain tunnel would switch to a protocol stockade cannot "
            "check; use TLS (https://, wss://)"
        )
    values = request.values("host")
    if len(values) != 1:
        raise BadRequest(f"{len(values)} Host headers in a tunnel request: send exactly one")
    named = _split_authority(values[0], port, "Host header")
    if named != (host, port):
        raise Refusal(
            "403 Forbidden",
            f"the Host header names {_quote(values[0])} in a tunnel to "
            f"{show(host, port)}; a tunnel carries requests only for its host",
        )
