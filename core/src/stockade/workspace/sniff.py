"""Telling text from binary, and naming a binary's kind, from a file's first bytes."""

from __future__ import annotations

import codecs
import hashlib
import mimetypes
import os


def _sha256_fd(fd: int) -> tuple[str, int]:
    """The sha256 and size of everything readable from ``fd``, read from its start."""
    digest = hashlib.sha256()
    size = 0
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        digest.update(chunk)
        size += len(chunk)
        offset += len(chunk)
    return digest.hexdigest(), size


_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF87a", "GIF image"),
    (b"GIF89a", "GIF image"),
    (b"%PDF-", "PDF document"),
    (b"PK\x03\x04", "ZIP archive (or a format built on it: jar, wheel, docx)"),
    (b"\x1f\x8b", "gzip-compressed data"),
    (b"BZh", "bzip2-compressed data"),
    (b"\xfd7zXZ\x00", "xz-compressed data"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data"),
    (b"\x7fELF", "ELF executable or library"),
    (b"\x00asm", "WebAssembly module"),
    (b"\xca\xfe\xba\xbe", "Java class or Mach-O universal binary"),
    (b"SQLite format 3\x00", "SQLite database"),
)


def _guess(head: bytes, name: str) -> str:
    """A guess of a binary file's type from its first bytes, else from its name."""
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP image"
    if head[257:262] == b"ustar":
        return "tar archive"
    guessed, _ = mimetypes.guess_type(name, strict=False)
    return f"{guessed} (from the name)" if guessed else "unknown binary data"


def _is_binary(head: bytes, *, whole: bool) -> bool:
    """Whether ``head`` (a file's first bytes; ``whole`` when it is all of it) is binary."""
    if b"\x00" in head:
        return True
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=whole)
    except UnicodeDecodeError:
        return True
    return False
