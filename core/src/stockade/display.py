"""Text a person reads, made unable to lie: hidden characters drawn as escapes, argv quoted.

Anything a command or an agent chose (argv, paths, file names, reasons that quote them,
output) may carry characters that rewrite a terminal (``ESC[2K``, ``\\r``), reorder what is
shown (U+202E) or show nothing at all (U+200B). Every place that shows such text to a person
goes through this module:

- :func:`command` and :func:`quote` give argv and single names as shell words. Hidden
  characters go into bash's ``$'...'`` form (``$'\\x1b'``, ``$'\\u202e'``), so argument
  boundaries and every character are visible, and bash reads the text back as the very
  same argv (:func:`split` does the same in Python): two different argvs never look alike.
- :func:`visible` gives prose (reasons, messages) and output with the same escapes; it
  keeps the characters it is told to (newlines and tabs for output) and backslashes as
  they are, so it is for reading, not for telling two texts apart.
- :func:`pieces`, :func:`quote_pieces` and :func:`command_pieces` give the same results cut
  into plain text and escapes, for a page that marks each escape (the run page).

Hidden: categories Cc, Cf, Cs, Co, Cn, Zl, Zp; spaces other than U+0020; Unicode's
default-ignorable code points (variation selectors, Hangul fillers, tags...); U+2800; and a
combining mark that has no letter of its own to sit on (at the start, after a space, a
quote or an escape) or is the fifth in a row. Letters of any script stay as they are.
"""

from __future__ import annotations

import functools
import re
import shlex
import unicodedata
from collections.abc import Iterable

Piece = tuple[str, "int | None"]
"""A stretch of shown text and, when it is the escape of one character, that code point."""

_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_MARKS = frozenset({"Mn", "Mc", "Me"})
# Default_Ignorable_Code_Point (Unicode DerivedCoreProperties) beyond the categories above,
# and the braille blank: all show as nothing or as a space.
_INVISIBLE = (
    (0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F),
    (0x2800, 0x2800), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0),
    (0xE0000, 0xE0FFF),
)  # fmt: skip
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_MAX_MARKS = 4
"""Combining marks shown on one letter; more are escaped (they can draw over other lines)."""
_NO_BASE = frozenset(" '\"\\$")


def hidden(char: str) -> bool:
    """Whether ``char`` is always drawn as an escape (a combining mark depends on context)."""
    code = ord(char)
    category = unicodedata.category(char)
    if category in _HIDDEN_CATEGORIES or (category == "Zs" and char != " "):
        return True
    return any(low <= code <= high for low, high in _INVISIBLE)


def escape(char: str) -> str:
    r"""The escape shown for one character: ``\t \n \r``, ``\xHH`` below U+0080 (and for
    a byte that was not UTF-8, as Python decodes it), ``\uHHHH``, ``\UHHHHHHHH``."""
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    if code < 0x80:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the undecodable byte itself
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


PLAIN = (
    (0x20, 0x7E), (0xA1, 0xAC), (0xAE, 0x2FF), (0x400, 0x482), (0x48A, 0x52F),
    (0x3041, 0x3096), (0x30A1, 0x30FA), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
)  # fmt: skip
"""Ranges of letters and signs that never need an escape, skipped at C speed (printable
ASCII, Latin, Cyrillic, kana, CJK ideographs, Hangul syllables)."""


@functools.cache
def _candidates(keep: str) -> re.Pattern[str]:
    """What may need an escape: everything outside :data:`PLAIN` and ``keep``."""
    ranges = "".join(f"{re.escape(chr(low))}-{re.escape(chr(high))}" for low, high in PLAIN)
    return re.compile(f"[^{re.escape(keep)}{ranges}]")


def _escaped(text: str, keep: str) -> set[int]:
    """The positions in ``text`` of the characters drawn as escapes."""
    out: set[int] = set()
    marks, last_mark = 0, -2
    for found in _candidates(keep).finditer(text):
        char, at = found.group(), found.start()
        if char in keep:
            continue
        if hidden(char):
            out.add(at)
        elif unicodedata.category(char) in _MARKS:
            marks = marks + 1 if last_mark == at - 1 else 1
            last_mark = at
            before = text[at - 1] if at else " "
            # a mark needs a letter shown as is to sit on, and only a few of them
            if at - 1 in out or before in _NO_BASE or before in keep or marks > _MAX_MARKS:
                out.add(at)
    return out


def pieces(text: str, *, keep: str = "") -> list[Piece]:
    """``text`` as plain stretches and escapes; characters in ``keep`` stay as they are."""
    out: list[Piece] = []
    start = 0
    for at in sorted(_escaped(text, keep)):
        if at > start:
            out.append((text[start:at], None))
        out.append((escape(text[at]), ord(text[at])))
        start = at + 1
    if start < len(text):
        out.append((text[start:], None))
    return out


def visible(text: str, *, keep: str = "") -> str:
    r"""``text`` with every hidden character drawn as its escape (``keep="\n\t"`` for output).

    Backslashes stay as they are: this is for reading; use :func:`quote` where two
    different texts must never look the same.
    """
    return "".join(shown for shown, _ in pieces(text, keep=keep))


def quote_pieces(word: str) -> list[Piece]:
    """:func:`quote` cut into plain stretches and escapes."""
    if not word:
        return [("''", None)]
    out: list[Piece] = []
    run: list[str] = []
    escapes: list[Piece] = []
    escaped = _escaped(word, "")
    for at, char in enumerate(word):
        if at in escaped:
            if run:
                out.append((shlex.quote("".join(run)), None))
                run = []
            escapes.append((escape(char), ord(char)))
            continue
        if escapes:
            out += [("$'", None), *escapes, ("'", None)]
            escapes = []
        run.append(char)
    if run:
        out.append((shlex.quote("".join(run)), None))
    if escapes:
        out += [("$'", None), *escapes, ("'", None)]
    return out


def quote(word: str) -> str:
    """``word`` as one shell word a person can read: quoted when it needs it, with hidden
    characters as ``$'...'`` escapes; bash reads it back as ``word`` exactly."""
    return "".join(shown for shown, _ in quote_pieces(word))


def command_pieces(argv: Iterable[str]) -> list[Piece]:
    """:func:`command` cut into plain stretches and escapes."""
    out: list[Piece] = []
    for index, word in enumerate(argv):
        if index:
            out.append((" ", None))
        out += quote_pieces(word)
    return out


def command(argv: Iterable[str]) -> str:
    """``argv`` as one line of shell words (:func:`quote` each, spaces between)."""
    return "".join(shown for shown, _ in command_pieces(argv))


_ESCAPE = re.compile(r"\\(?:x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8})|([tnr]))")
_SHORT_BACK = {"t": "\t", "n": "\n", "r": "\r"}


def _unescape(body: str) -> str:
    def one(found: re.Match[str]) -> str:
        byte, small, large, short = found.groups()
        if byte is not None:
            code = int(byte, 16)
            return chr(code if code < 0x80 else 0xDC00 + code)
        if short is not None:
            return _SHORT_BACK[short]
        return chr(int(small or large, 16))

    return _ESCAPE.sub(one, body)


_WORD = re.compile(
    r"\$'((?:\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|[tnr]))+)'"
    r"|'([^']*)'|\"(')\"|([^ '\"$]+)|( +)"
)


def split(shown: str) -> list[str]:
    """The argv that :func:`command` showed as ``shown`` (its inverse).

    Raises:
        ValueError: ``shown`` is not something :func:`command` writes.
    """
    words: list[str] = []
    current: list[str] | None = None
    position = 0
    while position < len(shown):
        found = _WORD.match(shown, position)
        if found is None:
            raise ValueError(f"not a command Stockade shows, at {position}: {shown!r}")
        escaped, quoted, quote_char, bare, space = found.groups()
        position = found.end()
        if space is not None:
            if current is not None:
                words.append("".join(current))
            current = None
            continue
        current = current if current is not None else []
        if escaped is not None:
            current.append(_unescape(escaped))
        else:
            current.append(next(part for part in (quoted, quote_char, bare) if part is not None))
    if current is not None:
        words.append("".join(current))
    return words
