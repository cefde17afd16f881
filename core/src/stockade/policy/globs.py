"""Private globs ready for a walk (:class:`Globs`): which names of a folder they match, and
which folders a walk must go into (:mod:`stockade.policy.walk` walks).

Globs follow :func:`fnmatch.fnmatchcase` (``*`` matches ``/`` too; ``**`` is read as ``*``,
which it equals, so no star backtracks over another). The usual shapes need no regular
expression, so a process's first step compiles none for them: a name without wildcards is
looked up, ``keys/*`` is a beginning, ``*.pem`` an ending and ``*/secret*`` a part.
"""

from __future__ import annotations

import fnmatch
import functools
import re

__all__ = ["Globs", "matcher"]


@functools.lru_cache(maxsize=64)
def matcher(globs: tuple[str, ...]) -> Globs:
    """``globs`` ready for a walk (made once a process per list)."""
    return Globs(globs)


class Globs:
    """``globs`` ready for a walk, with no regular expression for the usual shapes: a name
    without wildcards is looked up, ``dir/*`` is a beginning, ``*.ext`` an ending, ``*/secret*``
    a part; the others are one expression, compiled when first needed. A name is tried only
    against the globs whose fixed beginning (before the first wildcard) it starts with, and
    those that start with a wildcard; a folder is gone into only when a glob could match
    beneath it."""

    def __init__(self, globs: tuple[str, ...]) -> None:
        # `**` is `*` (which matches `/` too); left as it is, each star backtracks over the other
        globs = tuple(dict.fromkeys(_one_star(g) for g in globs))
        cut = {g: m.start() if (m := _WILD.search(g)) else len(g) for g in globs}
        wild = [g for g in globs if cut[g] == 0]
        fixed = [g for g in globs if cut[g] > 0]
        self.any = bool(wild)
        # `*.pem`: a star, then letters only, is an ending; `*/secret*` a part
        self.ends = tuple(g[1:] for g in wild if g[0] == "*" and not _wildcards(g[1:]))
        self.parts = tuple(
            g[1:-1] for g in wild if len(g) > 1 and g[0] == g[-1] == "*" and not _wildcards(g[1:-1])
        )
        plain = {f"*{e}" for e in self.ends} | {f"*{p}*" for p in self.parts}
        self._wild = tuple(g for g in wild if g not in plain)
        # `keys/*`: letters, then a star, is a beginning; letters only, one name
        self.names = frozenset(g for g in fixed if cut[g] == len(g))
        self.heads = Heads(tuple(g[: cut[g]] for g in fixed if g[cut[g] :] == "*"))
        self._fixed = tuple(g for g in fixed if g not in self.names and g[cut[g] :] != "*")
        self.starts = Heads(tuple(g[: cut[g]] for g in fixed))
        self.leading = self.starts.leading
        self._compiled: dict[str, re.Pattern[str] | None] = {}

    def _pattern(self, which: str) -> re.Pattern[str] | None:
        """The expression of the globs of no usual shape (``wild`` or ``fixed``), compiled
        once, when a name first needs it."""
        if which not in self._compiled:
            globs = self._wild if which == "wild" else self._fixed
            self._compiled[which] = _pattern(list(globs))
        return self._compiled[which]

    def matches(self, shown: str, names: list[str]) -> list[bool]:
        """:meth:`match` of each of ``names`` (entries of the folder named ``shown``), a
        folder at a time: the fixed globs only where one could match (:meth:`_could`)."""
        ends, parts = self.ends, self.parts
        if len(parts) == 1:  # the common case, without a loop per name
            part = parts[0]
            found = [part in n or n.endswith(ends) for n in names]
        elif parts:
            found = [n.endswith(ends) or any(p in n for p in parts) for n in names]
        elif ends:
            found = [n.endswith(ends) for n in names]
        else:
            found = [False] * len(names)
        if self._wild and (wild := self._pattern("wild")) is not None:
            found = [f or wild.match(n) is not None for f, n in zip(found, names, strict=True)]
        if self._could(shown):
            own, heads, starts = self.names, self.heads.begins, self.starts.begins
            found = [f or n in own or heads(n) for f, n in zip(found, names, strict=True)]
            if self._fixed and (fixed := self._pattern("fixed")) is not None:
                found = [
                    f or (starts(n) and fixed.match(n) is not None)
                    for f, n in zip(found, names, strict=True)
                ]
        return found

    def _could(self, shown: str) -> bool:
        """Whether a name in folder ``shown`` could begin with a fixed glob's beginning: the
        folder's name leads to one, or begins with one."""
        return not shown or shown in self.leading or self.starts.begins(shown)

    def beneath(self, folder: str) -> bool:
        """Whether a glob could match below ``folder`` (given with its ``/``)."""
        return self.any or folder in self.leading or self.starts.begins(folder)


class Heads:
    """Fixed beginnings, by first folder: a name is compared with its own folder's only."""

    def __init__(self, starts: tuple[str, ...]) -> None:
        self.by_head: dict[str, tuple[str, ...]] = {}
        for start in (s for s in starts if "/" in s):
            head = start.partition("/")[0]
            self.by_head[head] = (*self.by_head.get(head, ()), start)
        self.loose = tuple(s for s in starts if "/" not in s)
        # every folder (with its "/") that leads to a beginning
        leading = set()
        for start in starts:
            at = start.find("/")
            while at >= 0:
                leading.add(start[: at + 1])
                at = start.find("/", at + 1)
        self.leading = frozenset(leading)

    def begins(self, name: str) -> bool:
        """Whether ``name`` begins with one of the beginnings."""
        own = self.by_head.get(name.partition("/")[0])
        return (own is not None and name.startswith(own)) or name.startswith(self.loose)


def _wildcards(text: str) -> bool:
    return _WILD.search(text) is not None


_WILD = re.compile(r"[*?\[]")


def _pattern(globs: list[str]) -> re.Pattern[str] | None:
    return re.compile("|".join(fnmatch.translate(g) for g in globs)) if globs else None


def _one_star(glob: str) -> str:
    """``glob`` with each run of stars made one star, outside brackets only: ``[a-**]`` is a
    class holding ``*`` (read where :func:`fnmatch.translate` reads a class: a ``[``, then
    ``!`` and ``]`` taken as themselves first, up to the next ``]``; without one, a plain
    ``[``)."""
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        if c == "[":
            j = i + 1
            if j < n and glob[j] == "!":
                j += 1
            if j < n and glob[j] == "]":
                j += 1
            j = glob.find("]", j)
            if j >= 0:
                out.append(glob[i : j + 1])
                i = j + 1
                continue
        if not (c == "*" and out and out[-1] == "*"):
            out.append(c)
        i += 1
    return "".join(out)
