"""Byte streams inside an injecting tunnel: a buffered reader, a secret mask, a chunked body.

:class:`Source` reads from an asyncio stream with a buffer the caller can push bytes back
into (a request's body ends where the next request begins). :class:`Mask` is a streaming,
length-preserving scrubber: every byte that belongs to an occurrence of a form of a secret
becomes a fill byte that no form contains, so nothing in what it lets out spells a form,
and a ``Content-Length`` stays true. It holds back the last ``longest form - 1`` bytes of
what it was fed, so a form split across reads (or across chunks of a chunked body, which
:func:`rechunk` decodes first) is still found.

Why by hand: :mod:`stockade.record.redact` scrubs kept text and files, where a marker may
change lengths; a stream relayed to a client must keep its framing, which no scrubbing
library offers.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING

from .http import BadRequest

if TYPE_CHECKING:
    from .echoes import Pieces

__all__ = ["Mask", "Source", "rechunk"]

READ = 256 * 1024
LINE_LIMIT = 4096  # bytes of a chunk-size or trailer line
TRAILER_LIMIT = 64 * 1024
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\r\n]*)?\Z")
_FILLS = b"*#%~^x"


class Source:
    """Buffered reads from ``reader``; :class:`EOFError` when it ended before what was asked."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.buf = bytearray()

    async def _fill(self) -> None:
        data = await self.reader.read(READ)
        if not data:
            raise EOFError
        self.buf += data

    async def until(self, end: bytes, limit: int, what: str) -> bytes:
        """Everything up to and including ``end``, at most ``limit`` bytes."""
        start = 0
        while (at := self.buf.find(end, start)) < 0 or at + len(end) > limit:
            if len(self.buf) > limit:  # found past the limit (one read brought it all) too
                raise BadRequest(
                    f"{what} over {limit} bytes", "431 Request Header Fields Too Large"
                )
            start = max(0, len(self.buf) - len(end) + 1)
            await self._fill()
        out = bytes(self.buf[: at + len(end)])
        del self.buf[: at + len(end)]
        return out

    async def some(self, most: int = READ) -> bytes:
        """At least one byte, at most ``most``."""
        if not self.buf:
            await self._fill()
        out = bytes(self.buf[:most])
        del self.buf[:most]
        return out

    def unread(self, data: bytes) -> None:
        """Put ``data`` back in front."""
        self.buf[:0] = data

    async def at_end(self) -> bool:
        """Whether the stream ended with nothing left to read."""
        if self.buf:
            return False
        try:
            await self._fill()
        except EOFError:
            return True
        return False


class Mask:
    """Replaces every byte of every occurrence of ``forms`` with a fill byte; same length.

    Attributes:
        hits: occurrences found so far.
    """

    def __init__(
        self,
        forms: Iterable[bytes],
        patterns: Iterable[tuple[re.Pattern[bytes], int]] = (),
        pieces: Pieces | None = None,
    ) -> None:
        self.forms = sorted({form for form in forms if form}, key=len, reverse=True)
        self.patterns = tuple(patterns)  # (pattern, the longest it can match)
        self.pieces = pieces  # runs of a secret long enough to be masked wherever they are
        longest = max((reach for _, reach in self.patterns), default=0)
        longest = max(longest, pieces.reach if pieces is not None else 0)
        self.overlap = max(len(self.forms[0]) if self.forms else 0, longest) - 1
        self.overlap = max(self.overlap, 0)
        used = set(b"".join(self.forms))
        self.fill = next((c for c in _FILLS if c not in used), _FILLS[0])
        self._carry = b""
        self._marks = bytearray()
        self.hits = 0

    def feed(self, data: bytes) -> bytes:
        """What of the stream so far can no longer be part of an occurrence, masked."""
        if not self.forms and not self.patterns and self.pieces is None:
            return data
        window = self._carry + data
        marks = self._marks + bytearray(len(data))
        seen = len(self._carry)
        for form in self.forms:
            at = window.find(form)
            while at >= 0:
                marks[at : at + len(form)] = b"\1" * len(form)
                self.hits += at + len(form) > seen  # one inside the carry was counted
                at = window.find(form, at + 1)
        for pattern, _ in self.patterns:  # every percent-encoding, hex in any case
            for found in pattern.finditer(window):
                start, end = found.span()
                if marks[start:end].count(0):
                    marks[start:end] = b"\1" * (end - start)
                    self.hits += end > seen
        if self.pieces is not None:  # a half, a third: each masked in whichever answer
            self.hits += self.pieces.mark(window, marks)
        final = max(0, len(window) - self.overlap)
        out = self._apply(window, marks, final)
        self._carry, self._marks = window[final:], marks[final:]
        return out

    def flush(self) -> bytes:
        """The held-back end of the stream, masked; the mask is ready for a new stream."""
        out = self._apply(self._carry, self._marks, len(self._carry))
        self._carry, self._marks = b"", bytearray()
        return out

    def _apply(self, window: bytes, marks: bytearray, end: int) -> bytes:
        if marks.find(b"\1", 0, end) < 0:
            return window[:end]
        out = bytearray(window[:end])
        at = marks.find(b"\1", 0, end)
        while at >= 0:
            stop = marks.find(b"\0", at, end)
            stop = end if stop < 0 else stop
            out[at:stop] = bytes((self.fill,)) * (stop - at)
            at = marks.find(b"\1", stop, end)
        return bytes(out)


async def rechunk(source: Source, mask: Mask) -> AsyncIterator[bytes]:
    """A chunked body read from ``source``, its data masked as one stream and sent again
    as chunks (the same bytes of data, new boundaries); trailers are dropped.

    Raises:
        BadRequest: a malformed chunk size or trailer.
        EOFError: the body ended early.
    """
    while True:
        line = await source.until(b"\r\n", LINE_LIMIT, "a chunk-size line")
        found = _CHUNK_SIZE.match(line[:-2])
        if found is None:
            raise BadRequest("the upstream sent a malformed chunk size line")
        left = int(found.group(1), 16)
        if left == 0:
            break
        while left:
            data = await source.some(min(left, READ))
            left -= len(data)
            if out := mask.feed(data):
                yield b"%x\r\n%s\r\n" % (len(out), out)
        if await source.until(b"\r\n", 2, "a chunk's end") != b"\r\n":
            raise BadRequest("the upstream's chunk data is not followed by CRLF")
    size = 0
    while (line := await source.until(b"\r\n", LINE_LIMIT, "a trailer line")) != b"\r\n":
        size += len(line)
        if size > TRAILER_LIMIT:
            raise BadRequest(f"the upstream's trailers are over {TRAILER_LIMIT} bytes")
    if out := mask.flush():
        yield b"%x\r\n%s\r\n" % (len(out), out)
    yield b"0\r\n\r\n"
