"""Bounded capture of one output stream: head and tail kept, the whole stream spilled.

Until a stream passes its limit it is kept in memory as it is. The first byte past the limit
opens a spill file (owner-only, random name, in a private 0700 directory) holding everything
so far; from then on every chunk goes to the file, the head stays fixed and only the tail is
kept in memory. Memory is bounded by about 1.5x the limit whatever the command prints.
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import BinaryIO

from stockade.types import CollectedOutput


class SpillDir:
    """A private directory for spill files, created on first use (0700, random name)."""

    def __init__(self, parent: str | None = None) -> None:
        self._parent = parent
        self._path: str | None = None
        self._lock = threading.Lock()

    def new_file(self, stream: str) -> tuple[str, BinaryIO]:
        """A new owner-only file for ``stream`` and its path."""
        import tempfile

        with self._lock:
            if self._path is None or not os.path.isdir(self._path):
                self._path = tempfile.mkdtemp(prefix="stockade-spill-", dir=self._parent)
        fd, path = tempfile.mkstemp(prefix=f"{stream}-", suffix=".out", dir=self._path)
        return path, os.fdopen(fd, "wb")


class StreamCapture:
    """Collects one stream within ``limit`` bytes of memory."""

    def __init__(self, name: str, limit: int, spill: SpillDir) -> None:
        self.name = name
        self.limit = limit
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self._spill_dir = spill
        self._buffer = bytearray()
        self._tail = bytearray()
        self._digest = hashlib.sha256()
        self._total = 0
        self._file: BinaryIO | None = None
        self._path: str | None = None

    def feed(self, chunk: bytes) -> None:
        """Take the next chunk of the stream."""
        self._digest.update(chunk)
        self._total += len(chunk)
        if self._file is None:
            self._buffer += chunk
            if len(self._buffer) > self.limit:
                self._start_spilling()
            return
        self._file.write(chunk)
        self._tail += chunk
        if len(self._tail) > 2 * self.tail_limit:
            del self._tail[: len(self._tail) - self.tail_limit]

    def _start_spilling(self) -> None:
        self._path, self._file = self._spill_dir.new_file(self.name)
        self._file.write(self._buffer)
        self._tail = self._buffer[len(self._buffer) - self.tail_limit :]
        del self._buffer[self.head_limit :]

    def finish(self) -> CollectedOutput:
        """The collected stream; closes the spill file."""
        digest = self._digest.hexdigest()
        if self._file is None:
            return CollectedOutput(
                self._buffer.decode("utf-8", "replace"),
                False,
                total_bytes=self._total,
                sha256=digest,
            )
        self._file.close()
        tail = self._tail[len(self._tail) - self.tail_limit :]
        omitted = self._total - len(self._buffer) - len(tail)
        marker = (
            f"\n[stockade: {omitted} bytes omitted from the middle; "
            f"the whole stream ({self._total} bytes) is in {self._path}]\n"
        )
        text = self._buffer.decode("utf-8", "replace") + marker + tail.decode("utf-8", "replace")
        return CollectedOutput(
            text, True, total_bytes=self._total, sha256=digest, spill_path=self._path
        )

    def abandon(self) -> None:
        """Close the spill file after a failure."""
        if self._file is not None:
            self._file.close()
