"""From grants and carve-outs to the Landlock rules that say exactly that.

Landlock only ever allows: a rule grants rights on a file or a directory, and a right
granted on a directory holds for everything beneath it. It cannot say "read everything but
``~/.ssh``" or "write the workspace but not its ``.git``" directly. So a grant that has
carve-outs beneath it is split: the directory above a carve-out keeps only the rights that
no carve-out beneath it takes away, and each of its entries gets a rule of its own, down to
the carve-out, which gets what is left for it. Entries are listed once, when the rules are
made; an entry that appears later at such a split level gets nothing.

The price: a directory that holds a carve-out somewhere beneath it cannot grant the rights
the carve-out removes to its own new entries, since making an entry in a directory is a
right on that directory and so would reach into the carve-out as well. That is why a
``.git`` is not a carve-out (the host puts it back after the run instead, see
:mod:`stockade.run.guard`): only masked credential stores and the host's own files are.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

from attrs import frozen

from stockade.confine import protected

from . import abi


@frozen
class Rule:
    """Rights granted beneath one path.

    Attributes:
        path: a directory or a file, resolved.
        access: the Landlock rights (``abi.FS_*``); a file's are limited to file rights.
    """

    path: str
    access: int


def expand(
    grants: Iterable[tuple[str, int]],
    carveouts: Iterable[tuple[str, int]],
    listed: list[str] | None = None,
) -> list[Rule]:
    """The rules that grant ``grants`` except what ``carveouts`` take away beneath them.

    Args:
        grants: ``(path, rights)``: rights beneath each path.
        carveouts: ``(path, rights)``: rights that must not hold beneath each path. A
            carve-out that does not exist is dropped: there is nothing there to keep.
        listed: if given, every directory whose entries were listed is appended: the
            rules stay right for as long as none of them changes (its mtime) and the same
            carve-outs exist.

    Returns:
        One rule per path that needs one, in a stable order.
    """
    cuts = [(os.path.realpath(p), r) for p, r in carveouts if os.path.lexists(p)]
    rules: dict[str, int] = {}
    walk = _Walk(rules, listed)
    for path, rights in grants:
        real = os.path.realpath(path)
        try:
            info = os.lstat(real)
        except OSError:
            continue
        inner = [(c, r) for c, r in cuts if protected.inside(c, [real])]
        walk.expand(real, rights, inner, is_dir=stat.S_ISDIR(info.st_mode))
    return [Rule(path, access) for path, access in rules.items()]


class _Walk:
    def __init__(self, rules: dict[str, int], listed: list[str] | None) -> None:
        self.rules = rules
        self.listed = listed

    def expand(self, path: str, rights: int, cuts: list[tuple[str, int]], *, is_dir: bool) -> None:
        for cut, removed in cuts:
            if cut == path:
                rights &= ~removed
        # A carve-out that takes nothing this grant gives needs no split.
        deeper = [(c, r) for c, r in cuts if c != path and r & rights]
        if not is_dir:
            _add(self.rules, path, rights & abi.FS_FILE)
            return
        if not deeper:
            _add(self.rules, path, rights)
            return
        taken = 0
        below: dict[str, list[tuple[str, int]]] = {}
        prefix = len(path.rstrip("/")) + 1
        for cut, removed in deeper:
            taken |= removed
            below.setdefault(cut[prefix:].split("/", 1)[0], []).append((cut, removed))
        _add(self.rules, path, rights & ~taken)
        if self.listed is not None:
            self.listed.append(path)
        try:
            entries = list(os.scandir(path))
        except OSError:
            return  # cannot list it: its entries get nothing of their own
        for entry in entries:
            try:
                if entry.is_symlink():
                    continue  # a rule on a link would not govern what it points at
                child_is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue  # gone (or unreadable) since it was listed: it gets nothing
            self.expand(entry.path, rights, below.get(entry.name, []), is_dir=child_is_dir)


def _add(rules: dict[str, int], path: str, access: int) -> None:
    if access:
        rules[path] = rules.get(path, 0) | access
