"""Secret scrubbing: every form a credential's value may take, and its removal from text.

A child that received a secret may print it as it is, or encoded: base64 (an HTTP basic
auth header, a config dump), percent-encoded (a URL), hex (a debug dump). :func:`secret_forms`
lists those forms; :func:`scrub` replaces each of them in a kept output text with
``[redacted]``, and :func:`scrub_file` does the same to a spilled stream on disk;
:func:`refuse_in_argv` refuses a command whose argv carries one, since argv is shown,
logged and recorded everywhere.

Base64 needs care: a secret inside a longer byte stream (``user:secret``) is encoded
together with its neighbours, so its own base64 never appears. What does appear, whatever
the neighbours, is the run of characters that encode only the secret's bits, which depends
on where the secret starts within a 3-byte group (offset 0, 1 or 2). All three runs are
forms, so a secret embedded anywhere in a base64 stream is still caught.

Why this is written here rather than taken from a library: the scrubbers that exist either
find *unknown* secrets by pattern and entropy (detect-secrets, trufflehog: a different job,
with false positives an output cannot afford), or redact the literal value only (logging
filters). None that is well kept derives the encoded and base64-aligned forms of a *known*
value and removes them with the guarantee below. The code is small and has no
dependencies; it is tested by property (``core/tests/test_credentials.py``).

The guarantee of :func:`scrub`: the text it returns contains none of the forms of any of the
secrets, as a whole. It does not promise anything about a secret transformed otherwise
(reversed, compressed, encrypted, split by the program into pieces, base64 wrapped over
lines), and a form shorter than :data:`MIN_FORM` characters (of a derived encoding) is not
sought, since it would match by chance.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING
from urllib.parse import quote, quote_plus

import attrs

from ..errors import UsageError

if TYPE_CHECKING:
    from ..request.result import CollectedOutput

MARKER = "[redacted]"
"""What every form of a secret is replaced with."""

MIN_FORM = 4
"""Derived forms (encodings) shorter than this are not sought: they would match by chance.

The secret's value itself is always sought, however short.
"""

_URLSAFE = str.maketrans("+/", "-_")
_PERCENT = re.compile(r"%[0-9A-F]{2}")


def secret_forms(value: str) -> tuple[str, ...]:
    """Every form ``value`` may show up in, longest first, without repeats.

    The forms: the value itself; its UTF-8 bytes in base64 (standard and URL-safe alphabets,
    with and without ``=`` padding, and the three runs that encode only the secret's bits
    when it sits at offset 0, 1 or 2 of a 3-byte group inside a longer stream); percent-
    encoded (``quote(value, safe="")`` with upper- and lowercase hex digits, and
    ``quote_plus``); and hex (lower- and uppercase). Derived forms shorter than
    :data:`MIN_FORM` are left out. An empty value has no forms.
    """
    if not value:
        return ()
    raw = _bytes(value)
    padded = base64.b64encode(raw).decode("ascii")
    b64 = [padded, padded.rstrip("="), *(_aligned_run(raw, offset) for offset in range(3))]
    percent = quote(raw, safe="")
    derived = [
        *b64,
        *(form.translate(_URLSAFE) for form in b64),
        percent,
        _PERCENT.sub(lambda match: match.group().lower(), percent),
        quote_plus(raw),
        raw.hex(),
        raw.hex().upper(),
    ]
    forms = {value, *(form for form in derived if len(form) >= MIN_FORM)}
    return tuple(sorted(forms, key=lambda form: (-len(form), form)))


def _bytes(value: str) -> bytes:
    """The bytes a child is given for ``value``: UTF-8, undecodable bytes restored."""
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass")


def _aligned_run(raw: bytes, offset: int) -> str:
    """The base64 characters that encode only ``raw``'s bits when it starts ``offset``
    bytes into a 3-byte group: the same whatever bytes surround it."""
    first_bit = 8 * offset
    end_bit = first_bit + 8 * len(raw)
    start = -(-first_bit // 6)  # the first character that begins at or after the secret
    end = end_bit // 6  # one past the last character that ends inside it
    encoded = base64.b64encode(b"\0" * offset + raw).decode("ascii")
    return encoded[start:end]


def all_forms(secrets: Iterable[str]) -> tuple[str, ...]:
    """The forms of every secret in ``secrets``, longest first, without repeats."""
    forms = {form for secret in secrets for form in secret_forms(secret)}
    return tuple(sorted(forms, key=lambda form: (-len(form), form)))


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every form of every secret replaced by :data:`MARKER`.

    Every occurrence of every form is found, overlapping ones too, and each run of
    overlapping or touching occurrences becomes one marker, so no part of a longer form is
    left beside a shorter one. Text without any form is returned unchanged.

    The result holds no form of any secret: what is left between markers held none, and a
    form that would cross a marker must contain its first or last character (``[``, ``]``)
    or lie inside it. For a secret where that could happen, the marker is instead a run of
    a character that none of its forms contains (see :func:`marker_for`).
    """
    forms = all_forms(secrets)
    if not text or not forms:
        return text
    spans = _spans(text, forms)
    if not spans:
        return text
    marker = marker_for(forms).decode("utf-8")
    parts = []
    kept = 0
    for start, end in spans:
        parts.append(text[kept:start])
        parts.append(marker)
        kept = end
    parts.append(text[kept:])
    return "".join(parts)


def _spans(text: str, forms: Sequence[str]) -> list[tuple[int, int]]:
    """Every occurrence of every form, merged where they overlap or touch, in order."""
    found = []
    for form in forms:
        start = text.find(form)
        while start != -1:
            found.append((start, start + len(form)))
            start = text.find(form, start + 1)
    found.sort()
    merged: list[tuple[int, int]] = []
    for start, end in found:
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def marker_for(forms: Iterable[str]) -> bytes:
    """The marker to replace ``forms`` with, as UTF-8: :data:`MARKER` when no form could
    be spelled across it; else ten of the first character none of the forms' bytes holds.

    ``[redacted]`` is safe unless a form holds ``[`` or ``]`` or lies inside it; a marker
    whose bytes no form holds is safe for any forms, in text and in bytes alike.
    """
    encoded = [_bytes(form) for form in forms]
    plain = MARKER.encode("ascii")
    if not any(b"[" in form or b"]" in form or form in plain for form in encoded):
        return plain
    used = set(b"".join(encoded))
    for char in _INERT_CANDIDATES:
        if used.isdisjoint(char.encode("utf-8")):
            return char.encode("utf-8") * len(MARKER)
    return plain  # forms holding every byte that could mark them: not promised


_INERT_CANDIDATES = (
    "\u2588",  # FULL BLOCK
    *(chr(code) for code in range(0x21, 0x7F)),
    *(chr(code) for code in range(0x2589, 0x2600)),
)


def scrub_file(path: str, secrets: Iterable[str], *, chunk_size: int = 1 << 20) -> bool:
    """Scrub the file at ``path`` (a spilled stream, maybe gigabytes) like :func:`scrub`.

    Streamed in chunks of ``chunk_size`` bytes with an overlap of the longest form, so a
    form across a chunk boundary is caught. The file is read once to look for a form; only
    when one is there is it written again: to a new owner-only file beside it, renamed over
    it, so a reader never sees half a scrubbed file.

    Returns:
        Whether the file held a form and was rewritten.
    """
    texts = all_forms(secrets)
    if not texts:
        return False
    forms = sorted({_bytes(form) for form in texts}, key=len, reverse=True)
    overlap = len(forms[0]) - 1
    if not _file_holds(path, forms, overlap, chunk_size):
        return False
    marker = marker_for(texts)
    folder, name = os.path.split(path)
    temp = os.path.join(folder, f".{name}.scrub.{os.urandom(6).hex()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        with open(path, "rb") as source, os.fdopen(os.open(temp, flags, 0o600), "wb") as out:
            chunks = iter(lambda: source.read(chunk_size), b"")
            for part in _scrub_chunks(chunks, forms, overlap, marker):
                out.write(part)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return True


def _file_holds(path: str, forms: Sequence[bytes], overlap: int, chunk_size: int) -> bool:
    with open(path, "rb") as source:
        carry = b""
        while chunk := source.read(chunk_size):
            window = carry + chunk
            if any(form in window for form in forms):
                return True
            carry = window[max(0, len(window) - overlap) :]
    return False


def _scrub_chunks(
    chunks: Iterable[bytes], forms: Sequence[bytes], overlap: int, marker: bytes
) -> Iterator[bytes]:
    """The scrubbed stream: each byte that any occurrence of a form covers is marked, and
    each run of marked bytes becomes one marker. A byte is let out once no later occurrence
    can reach it (it lies more than ``overlap`` bytes before the end of what was read)."""
    carry, covered = b"", bytearray()
    in_run = False  # the last byte let out was a marked one
    for chunk in chunks:
        window = carry + chunk
        marks = covered + bytearray(len(chunk))
        for form in forms:
            start = window.find(form)
            while start != -1:
                marks[start : start + len(form)] = b"\1" * len(form)
                start = window.find(form, start + 1)
        final = max(0, len(window) - overlap)
        part, in_run = _let_out(window, marks, final, marker, in_run=in_run)
        yield part
        carry, covered = window[final:], marks[final:]
    # Every occurrence within the carry was found while it was still in a window.
    yield _let_out(carry, covered, len(carry), marker, in_run=in_run)[0]


def _let_out(
    window: bytes, marks: bytearray, end: int, marker: bytes, *, in_run: bool
) -> tuple[bytes, bool]:
    parts = []
    position = 0
    while position < end:
        marked = marks[position] == 1
        stop = marks.find(b"\0" if marked else b"\1", position, end)
        stop = end if stop == -1 else stop
        if not marked:
            parts.append(window[position:stop])
        elif not (position == 0 and in_run):
            parts.append(marker)
        position = stop
    if end:
        in_run = marks[end - 1] == 1
    return b"".join(parts), in_run


def refuse_in_argv(argv: Sequence[str], secrets: Iterable[str]) -> None:
    """Refuse a command whose argv carries a secret, in any of its :func:`secret_forms`.

    Raises:
        UsageError: an argv item holds a secret's value or an encoding of it; the message
            names the item's position, never the secret.
    """
    forms = all_forms(secrets)
    if not forms:
        return
    for index, item in enumerate(argv):
        if any(form in item for form in forms):
            raise UsageError(
                f"argument {index} of the command holds the value of a credential it was "
                "given (or an encoding of it); a secret is never accepted in argv",
                hint="pass the secret by handle (credentials / env = {NAME = {secret = "
                "HANDLE}}) and let the program read it from its environment",
                details={"argument": index},
            )


def redact_output(output: CollectedOutput, secrets: Iterable[str]) -> CollectedOutput:
    """``output`` with every form of every secret scrubbed, in the text and the spill file."""
    secrets = tuple(secrets)
    if not any(secrets):
        return output
    import hashlib

    text = scrub(output.text, secrets)
    if output.spill_path is not None and scrub_file(output.spill_path, secrets):
        # The digest and size describe the stream as it is kept: scrubbed.
        digest, size = hashlib.sha256(), 0
        with open(output.spill_path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
        return attrs.evolve(output, text=text, sha256=digest.hexdigest(), total_bytes=size)
    if text == output.text:
        return output
    if not output.truncated:
        raw = text.encode("utf-8", "surrogateescape")
        return attrs.evolve(
            output, text=text, sha256=hashlib.sha256(raw).hexdigest(), total_bytes=len(raw)
        )
    return attrs.evolve(output, text=text)
