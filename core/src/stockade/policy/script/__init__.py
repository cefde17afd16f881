"""Shell scripts read by their parts: ``sh -c SCRIPT`` judged by the commands it runs.

A script given to ``sh``, ``bash`` or ``dash`` with ``-c`` is parsed with tree-sitter's
bash grammar (:mod:`._parse`). When it is made only of simple commands of literal words,
joined by ``;``, newlines, ``&&``, ``||`` and ``|``, with redirections only to files in the
command's writable roots, it is classed as the strongest of its parts, each part classified
by the caller's classifier (:mod:`._judge`). Anything else (an expansion, a substitution, a
function, ``eval``, a here-document that expands, a node the reader does not know) leaves
it unread, and an unread script is ``destroys``, as every shell was before.

This package is imported only when a command runs a shell: tree-sitter stays off the path
of every other command.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from ...request.literals import Kind
from ._judge import (
    BUILTINS,
    DANGEROUS_ENV,
    DEPTH,
    READ_SHELLS,
    STEERING,
    Classify,
    Context,
    Programs,
    context_of,
    dangerous,
    judge,
    shell_script,
    shown,
)
from ._parse import LIMIT, read
from ._types import Part, Redirect, Script, Unread

__all__ = [
    "BUILTINS",
    "DANGEROUS_ENV",
    "DEPTH",
    "LIMIT",
    "READ_SHELLS",
    "STEERING",
    "Context",
    "Part",
    "Redirect",
    "Script",
    "ShellVerdict",
    "Unread",
    "classify_shell",
    "context_of",
    "read",
    "read_cached",
    "shell_script",
    "shown",
]

ShellVerdict = tuple[Kind, str, tuple[str, ...], tuple[Part, ...]]
"""The class, the reason, the parts as shown, and the parts read (empty when unread)."""


@functools.lru_cache(maxsize=256)
def read_cached(text: str) -> Script | Unread:
    """:func:`read`, remembered: a command is classified, then shown and checked again."""
    return read(text)


def classify_shell(  # noqa: PLR0911 - one return per reason a script stays destroys
    name: str,
    *,
    args: Sequence[str],
    prefix: Sequence[str],
    context: Context | None,
    classify: Classify,
    programs: Programs,
) -> ShellVerdict:
    """The class of the shell ``name`` run with ``args``, after the wrapper words ``prefix``.

    A script that is not read, and a shell that runs no ``-c`` script (a file, stdin, a
    terminal), are ``destroys``.
    """
    unread = f"{name} runs a shell script, which argv cannot show"
    if name not in READ_SHELLS:
        return "destroys", unread, (), ()
    text = shell_script(args)
    if text is None:
        return "destroys", unread, (), ()
    if isinstance(text, Unread):
        return "destroys", f"{name} runs a script the reader does not read: {text.reason}", (), ()
    context = context or Context()
    set_here = [w.split("=", 1)[0] for w in prefix if "=" in w and not w.startswith("=")]
    risky = [n for n in set_here if dangerous(n) or n == "PATH"]
    if risky:
        why = f"{name} -c is run with {', '.join(risky)} set, which changes what a shell runs"
        return "destroys", why, (), ()
    if context.depth >= DEPTH:
        return "destroys", f"{name} -c runs a script nested more than {DEPTH} deep", (), ()
    script = read_cached(text)
    if isinstance(script, Unread):
        return "destroys", f"{name} -c runs a script not read by its parts: {script.reason}", (), ()
    kind, why, seen = judge(script, context, classify, programs)
    count = f"{len(script.parts)} part{'s' if len(script.parts) != 1 else ''}"
    return kind, f"{name} -c runs a script of {count}, read one by one; {why}", seen, script.parts
