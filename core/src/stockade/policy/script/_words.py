"""Literal words: the one value a shell word has when nothing in it expands.

A word is read here only when bash and dash give it the same value without expanding
anything: letters and punctuation that mean nothing to a shell, backslash escapes,
single quotes, and double quotes whose content holds no ``$`` or backquote. Anything a
shell would expand (``$``, backquotes, ``*?[`` globs, ``~``, braces) makes the word not
literal, and :func:`literal` returns ``None``: the caller treats the script as unread.
"""

from __future__ import annotations

import re

# Unquoted, these mean something to a shell: expansion, globbing, quoting, operators.
_SPECIAL = frozenset("$`'\"\\*?[]{}!#|&;<>() \t\n")
# The common words, read at once: plain unquoted ones, and one single-quoted string.
_PLAIN = re.compile(r"[A-Za-z0-9_./,:@%+=^-][A-Za-z0-9_./,:@%+=^~-]*")
_QUOTED = re.compile(r"'[^']*'")
# In double quotes a backslash escapes only these; before anything else it stays.
_DQ_ESCAPES = frozenset('$`"\\')


def literal(text: str) -> str | None:  # noqa: PLR0911, PLR0912 - one branch per quoting form
    """The value of the shell word ``text``, or ``None`` when it is not a plain literal.

    ``a\\ b`` is ``a b``, ``'x y'`` is ``x y``, ``"a\\"b"`` is ``a"b``, ``ab'c'"d"`` is
    ``abcd``. ``$x``, ``*.py``, ``~/x``, ``{a,b}``, ``$'...'``, a backslash before a
    newline, and a control character outside quotes are not literal.
    """
    if _PLAIN.fullmatch(text):
        return None if re.search(r"[=:]~", text) else text
    if _QUOTED.fullmatch(text):
        return text[1:-1]
    out: list[str] = []
    i, n = 0, len(text)
    if n == 0:
        return None
    while i < n:
        char = text[i]
        if char == "'":
            end = text.find("'", i + 1)
            if end < 0:
                return None
            out.append(text[i + 1 : end])
            i = end + 1
        elif char == '"':
            i += 1
            while True:
                if i >= n:
                    return None
                char = text[i]
                if char == '"':
                    i += 1
                    break
                if char in "$`":
                    return None
                if char == "\\":
                    if i + 1 >= n or text[i + 1] == "\n":
                        return None
                    following = text[i + 1]
                    out.append(following if following in _DQ_ESCAPES else "\\" + following)
                    i += 2
                    continue
                out.append(char)
                i += 1
        elif char == "\\":
            if i + 1 >= n or text[i + 1] == "\n":
                return None
            out.append(text[i + 1])
            i += 2
        elif char in _SPECIAL or not char.isprintable():
            return None
        elif char == "~" and (i == 0 or text[i - 1] in "=:"):
            return None  # a tilde expands at a word's start, and after = or : in bash
        else:
            out.append(char)
            i += 1
    return "".join(out)
