"""The frames between the thin client and the server: a 4-byte length, then a JSON object.

Standard library only: the client imports this and nothing else of Stockade's machinery.
Written by hand because it is 4 bytes and JSON: no library frames a Unix socket stream more
simply, and the client must not pay for importing one. The JSON is the standard library's own
C encoder and scanner (``_json``), called directly: importing :mod:`json` costs the thin
client ~10 ms (it imports ``re`` and ``enum``), a third of its whole budget. Where ``_json``
is missing (another Python), :mod:`json` does the same work.

Every frame is an object with a ``type``. A conversation:

    client  hello {version, token, op: call|status|stop}
    server  welcome {version, pid}            or refused {code, message}
    client  call {argv, cwd, env, tty}        (op call only)
    server  out {fd, text} ...  ask {text}    (the client answers: answer {text})
    server  env {name}                        (the client answers: env {name, value}, a
                                               variable it withheld, or null)
    client  signal {name}                     (Ctrl-C at the client: the command is killed)
    server  exit {status}
"""

from __future__ import annotations

import _socket

from .. import __version__

VERSION = f"{__version__}/2"
"""The package's version and the protocol's revision: a client talks only to its own server."""

HOT = frozenset({"run", "pending", "approve", "decline", "start", "read", "kill", "tasks"})
"""The commands the server runs for a client; every other one runs in the client's process."""

MAX_FRAME = 16 * 1024 * 1024
"""The largest frame either side accepts (a command's output travels in many frames)."""

CHUNK = 2 * 1024 * 1024
"""The most text one ``out`` frame carries: a result's text (the output limit keeps it near
1 MiB) goes in one frame, so the client writes it as the in-process command does, in one
write (a reader that leaves early sees the same thing); escaped, it stays under MAX_FRAME."""

_HEADER_SIZE = 4
"""A frame's length, big-endian (``int.to_bytes``: the ``struct`` module costs the client an
import)."""


def command_of(argv: list[str]) -> str | None:
    """The hot command ``stockade ARGV`` names, or ``None`` when it is to run in-process:
    another command, ``--no-server``, ``--version``, help (its width is the terminal's), or
    an option the top level does not know."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--config":
            i += 2
        elif arg.startswith("--config="):
            i += 1
        elif arg.startswith("-"):
            return None
        else:
            rest = argv[i + 1 :]
            options = rest[: rest.index("--")] if "--" in rest else rest
            if arg not in HOT or "-h" in options or "--help" in options:
                return None
            return arg
    return None


class ProtocolError(Exception):
    """A frame that is not one: truncated, too large, not JSON, not an object with a type."""

    def __init__(self, message: str, *, code: str = "bad_frame") -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _no_constants(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _unencodable(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not a JSON value")


class _Scanning:
    """What ``_json.make_scanner`` reads from a decoder: strict JSON, plain dicts."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_no_constants)

    def __init__(self) -> None:
        self.memo: dict[str, str] = {}


def dumps(value: object) -> str:
    """Compact JSON text for ``value`` (ASCII: every other character escaped)."""
    try:
        import _json
    except ImportError:  # pragma: no cover - CPython has it
        import json

        return json.dumps(value, separators=(",", ":"))
    encode = _json.make_encoder(
        None, _unencodable, _json.encode_basestring_ascii, None, ":", ",", False, False, False
    )
    return "".join(encode(value, 0))


def loads(text: str) -> object:
    """The value of JSON ``text``.

    Raises:
        ValueError: it is not one JSON value (NaN and Infinity are not JSON).
    """
    try:
        import _json
    except ImportError:  # pragma: no cover - CPython has it
        import json

        return json.loads(text, parse_constant=_no_constants)
    start = len(text) - len(text.lstrip(" \t\n\r"))
    try:
        # (typeshed names the context by the scanner's own type; any object with these
        # attributes is what the C scanner reads, as json.decoder.JSONDecoder is)
        value, end = _json.make_scanner(_Scanning())(text, start)  # type: ignore[arg-type]
    except StopIteration as stop:
        raise ValueError(f"no JSON value at character {stop.value}") from None
    except SystemError:
        # The scanner raises json.decoder's error class, found only if json.decoder was
        # imported (the thin client never imports it): else this, for text that is not JSON.
        raise ValueError("text that is not JSON") from None
    if text[end:].strip(" \t\n\r"):
        raise ValueError(f"extra data after the JSON value at character {end}")
    return value


def encode(message: dict[str, object]) -> bytes:
    """``message`` as one frame."""
    body = dumps(message).encode("ascii")
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"a frame of {len(body)} bytes is over the limit of {MAX_FRAME}")
    return len(body).to_bytes(_HEADER_SIZE, "big") + body


def send(sock: _socket.socket, message: dict[str, object]) -> None:
    """Send ``message`` as one frame."""
    sock.sendall(encode(message))


def _exactly(sock: _socket.socket, size: int, *, started: bool) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 20))
        if not chunk:
            if not data and not started:
                return None  # the peer closed between frames
            raise ProtocolError(
                f"the connection closed inside a frame ({len(data)} of {size} bytes came)",
                code="truncated",
            )
        data += chunk
    return bytes(data)


MAX_HELLO = 64 * 1024
"""The largest frame a peer may send before it has shown the secret."""


def receive(sock: _socket.socket, *, limit: int = MAX_FRAME) -> dict[str, object] | None:
    """The next frame's object; ``None`` when the peer closed the connection between frames.
    A frame over ``limit`` bytes is refused before any of it is read.

    Raises:
        ProtocolError: a truncated or oversized frame, or one that is not a JSON object with
            a string ``type``.
    """
    header = _exactly(sock, _HEADER_SIZE, started=False)
    if header is None:
        return None
    size = int.from_bytes(header, "big")
    if size > limit:
        raise ProtocolError(
            f"a frame of {size} bytes is over the limit of {limit}", code="too_large"
        )
    body = _exactly(sock, size, started=True)
    assert body is not None  # noqa: S101 - started=True never gives None
    try:
        message = loads(body.decode("utf-8", "surrogatepass"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ProtocolError(f"a frame that is not JSON: {error}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ProtocolError("a frame must be a JSON object with a string 'type'")
    return message
