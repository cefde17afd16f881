"""What of an injected secret an upstream may echo back, for the response mask to find.

:func:`encodings` gives patterns for the encodings a whole secret may come back in beside
:func:`stockade.record.redact.secret_forms`: every percent-encoding (whatever characters the
encoder keeps) and hex in any mix of cases, and base64 or base64url wrapped over lines (MIME's
76 columns with CRLF, PEM's 64 with LF, a JSON string's escaped ``\\n``) or spaced. Each
comes with the longest it can match, which the mask holds back across reads.

:class:`Pieces` finds a *piece* of a secret: a run of at least :data:`PIECE` consecutive bytes
of it, or the matching run of its hex (any case), its ``%XX`` encoding or its base64 (either
alphabet, at any of the three alignments), in any answer. Masking pieces is what keeps an
upstream from handing the secret out in halves across answers: each half is masked where it
appears, in whichever answer, so no set of answers puts it together from pieces that long.

Why by hand: the standard library has no multi-pattern search; a piece is found from a few
fixed blocks of each stream (any run at least ``m`` long holds a whole block of ``(m + 1) //
2`` bytes starting at a multiple of that size), each found with ``bytes.find`` and then
grown both ways against the stream, so a read costs a few scans at C speed.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable

__all__ = ["PIECE", "Pieces", "encodings"]

PIECE = 12
"""A run of this many bytes of a secret, or more, is masked wherever it appears."""
_B64_PIECE = 15  # base64 characters that a piece of PIECE bytes always fixes, at any alignment
_WRAP = rb"(?:\r|\n|[ \t]|\\[rnt]){0,4}"  # what a wrapping encoder puts between characters
_WRAP_REACH = 8  # the most bytes _WRAP matches
_URLSAFE = bytes.maketrans(b"+/", b"-_")
_STANDARD = bytes.maketrans(b"-_", b"+/")  # base64url read as base64: one search for both
_AS_IS, _FOLDED, _B64 = 0, 1, 2  # how a stream is compared: the views of a window


def _hexed(byte: int) -> bytes:
    return b"".join(
        b"[%s%s]" % (c.lower(), c.upper()) if c.isalpha() else c
        for c in (bytes([d]) for d in b"%02x" % byte)
    )


def encodings(value: str) -> list[tuple[re.Pattern[bytes], int]]:
    """Patterns for every percent-encoding of ``value`` (each byte as it is or as ``%XX``,
    hex digits in either case, a space also as ``+``: whatever characters an encoder keeps),
    its hex in any mix of cases, and its base64 and base64url wrapped or spaced, each with
    the longest it can match."""
    raw = value.encode("utf-8", "surrogateescape")
    percent = b"".join(
        b"(?:%s|%%%s%s)"
        % (
            re.escape(bytes([b])) if b != 0x25 else b"(?!)",
            _hexed(b),
            b"|\\+" if b == 0x20 else b"",
        )
        for b in raw
    )
    mixed = b"".join(_hexed(b) for b in raw)
    found = [(re.compile(percent), 3 * len(raw)), (re.compile(mixed), 2 * len(raw))]
    for run in _b64_runs(raw):
        wrapped = _WRAP.join(re.escape(bytes([c])) for c in run)
        found.append((re.compile(wrapped), len(run) * (1 + _WRAP_REACH)))
    return found


def _b64_runs(raw: bytes, *, both: bool = True) -> list[bytes]:
    """The base64 characters that encode only ``raw``'s bits when it starts 0, 1 or 2 bytes
    into a 3-byte group, in both alphabets (or the standard one only)."""
    runs = []
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw)
        run = encoded[-(-8 * offset // 6) : (8 * (offset + len(raw))) // 6]
        runs += [run, run.translate(_URLSAFE)] if both else [run]
    return list(dict.fromkeys(runs))


class Pieces:
    """Finds the pieces of ``values`` (see the module): runs of at least :data:`PIECE` bytes
    of a secret, or of its hex, ``%XX`` or base64 streams, the same length in them."""

    def __init__(self, values: Iterable[str]) -> None:
        self.streams: list[bytes] = []
        self.blocks: list[tuple[bytes, int, int, int, int]] = []  # block, stream, at, least, view
        for value in values:
            raw = value.encode("utf-8", "surrogateescape")
            hexed = raw.hex().encode()
            self._add(raw, PIECE, _AS_IS)
            self._add(hexed, 2 * PIECE, _FOLDED)
            self._add(b"".join(b"%" + hexed[i : i + 2] for i in range(0, len(hexed), 2)),
                      3 * PIECE, _FOLDED)  # fmt: skip
            for run in _b64_runs(raw, both=False):
                self._add(run, _B64_PIECE, _B64)
        self.reach = max((len(stream) for stream in self.streams), default=0)

    def _add(self, stream: bytes, least: int, view: int) -> None:
        if len(stream) < least:
            return
        index = len(self.streams)
        self.streams.append(stream)
        size = (least + 1) // 2
        for at in range(0, len(stream) - size + 1, size):
            self.blocks.append((stream[at : at + size], index, at, least, view))

    def mark(self, window: bytes, marks: bytearray) -> int:
        """Set ``marks`` (one a byte of ``window``) over every piece found; how many."""
        found = 0
        if not self.blocks:
            return 0
        views = (window, window.lower(), window.translate(_STANDARD))
        for block, index, at, least, view in self.blocks:
            text = views[view]
            hit = text.find(block)
            while hit >= 0:
                start, end = self._grow(text, self.streams[index], hit, at, len(block))
                if end - start >= least and marks[start:end].count(0):
                    marks[start:end] = b"\1" * (end - start)
                    found += 1
                hit = text.find(block, hit + 1)
        return found

    @staticmethod
    def _grow(text: bytes, stream: bytes, hit: int, at: int, size: int) -> tuple[int, int]:
        """The longest run around ``text[hit:hit + size]`` that matches ``stream`` around
        ``stream[at:at + size]``."""
        before = 0
        while before < min(hit, at) and text[hit - before - 1] == stream[at - before - 1]:
            before += 1
        after = size
        most = min(len(text) - hit, len(stream) - at)
        while after < most and text[hit + after] == stream[at + after]:
            after += 1
        return hit - before, hit + after
