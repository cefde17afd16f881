"""Bounded capture of one output stream: head and tail kept, the whole stream spilled.

Until a stream passes its limit it is kept in memory as it is. The first byte past the limit
opens a spill file (owner-only, random name, in a private 0700 directory) holding everything
so far; from then on every chunk goes to the file, the head stays fixed and only the tail is
kept in memory. Memory is bounded by about 1.5x the limit whatever the command prints. A
stream within its limit that is not UTF-8 gets a spill file too, once it ended: its text
shows U+FFFD where its bytes were, and the record keeps the bytes from the file.
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import BinaryIO

from stockade.request.result import CollectedOutput

PREFIX = "stockade-spill-"
KEEP_HOURS = 24.0


class SpillDir:
    """A private directory for spill files, created on first use (0700, random name).

    Making it first sweeps the parent of this user's spill directories left untouched for
    ``keep_hours`` (``0`` keeps them for ever): spill files outlive their command for the
    caller to read, but not for ever.
    """

    def __init__(self, parent: str | None = None, *, keep_hours: float = KEEP_HOURS) -> None:
        if not keep_hours >= 0:
            raise ValueError(f"spill_keep_hours must be 0 or more, got {keep_hours!r}")
        self._parent = parent
        self._keep = keep_hours * 3600
        self._path: str | None = None
        self._lock = threading.Lock()

    def new_file(self, stream: str) -> tuple[str, BinaryIO]:
        """A new owner-only file for ``stream`` and its path."""
        import tempfile

        with self._lock:
            if self._path is None or not os.path.isdir(self._path):
                parent = self._parent if self._parent is not None else tempfile.gettempdir()
                if self._keep:
                    sweep(parent, self._keep)
                self._path = tempfile.mkdtemp(prefix=PREFIX, dir=parent)
        fd, path = tempfile.mkstemp(prefix=f"{stream}-", suffix=".out", dir=self._path)
        return path, os.fdopen(fd, "wb")


def sweep(parent: str, older_than: float) -> int:
    """Remove this user's spill directories in ``parent`` untouched for ``older_than``
    seconds; returns how many. Only real 0700 directories named ``stockade-spill-*`` and
    owned by this user are touched: a link or another user's folder is left alone."""
    import stat
    import time

    from stockade.trees import remove_tree  # without recursion, as every tree removal

    now, removed = time.time(), 0
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(PREFIX):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        mine = stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
        if not mine or stat.S_IMODE(info.st_mode) != 0o700:
            continue
        newest = max([info.st_mtime, *_mtimes(entry.path)])
        if now - newest > older_than:
            remove_tree(entry.path)
            removed += not os.path.lexists(entry.path)
    return removed


def _mtimes(folder: str) -> list[float]:
    """When each file in ``folder`` was last written (a file still growing is in use)."""
    out = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                try:
                    out.append(entry.stat(follow_symlinks=False).st_mtime)
                except OSError:
                    continue
    except OSError:
        pass
    return out


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
            try:
                text, kept = self._buffer.decode("utf-8"), None
            except UnicodeDecodeError:  # shown with U+FFFD; the bytes kept for the record
                text, kept = self._buffer.decode("utf-8", "replace"), self._keep()
            return CollectedOutput(
                text, False, total_bytes=self._total, sha256=digest, spill_path=kept
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

    def _keep(self) -> str | None:
        """The stream's exact bytes in a spill file of their own, for a stream that is not
        UTF-8 (its text shows U+FFFD in their place, and the record would keep that);
        ``None`` where no spill file can be made (the text is all there is then)."""
        try:
            path, handle = self._spill_dir.new_file(self.name)
        except OSError:
            return None
        with handle:
            handle.write(self._buffer)
        return path

    def abandon(self) -> None:
        """Close the spill file after a failure."""
        if self._file is not None:
            self._file.close()
