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

Each rule's path is opened again when a run's ruleset is built (:func:`build`), some time
after the listing: an entry removed in between gets no rule, and so does one whose path now
leads elsewhere (a folder on the way swapped for a symlink), so a grant never follows a link.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

from attrs import frozen

from stockade import resolved
from stockade.confine import protected
from stockade.errors import SandboxUnavailable

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
    cuts = [(resolved.realpath(p), r) for p, r in carveouts if os.path.lexists(p)]
    rules: dict[str, int] = {}
    walk = _Walk(rules, listed)
    for path, rights in grants:
        real = resolved.realpath(path)
        try:
            info = os.lstat(real)
        except OSError:
            continue
        inner = [(c, r) for c, r in cuts if protected.inside(c, [real])]
        walk.expand(real, rights, inner, is_dir=stat.S_ISDIR(info.st_mode))
    return [Rule(path, access) for path, access in rules.items()]


class _Walk:
    """The split of grants around carve-outs, folder by folder down to each carve-out;
    without recursion (a stack of the folders still to split), since a carve-out may lie as
    deep as a path can name (a command can make a private ``*.pem`` 2,000 folders down)."""

    def __init__(self, rules: dict[str, int], listed: list[str] | None) -> None:
        self.rules = rules
        self.listed = listed

    def expand(self, path: str, rights: int, cuts: list[tuple[str, int]], *, is_dir: bool) -> None:
        todo: list[_Split] = [(path, rights, cuts, is_dir)]
        while todo:
            todo.extend(reversed(self._split(todo.pop())))  # in order: as a recursion would

    def _split(self, split: _Split) -> list[_Split]:
        """The rule of ``path``; and, when a carve-out lies beneath it, its entries to split."""
        path, rights, cuts, is_dir = split
        for cut, removed in cuts:
            if cut == path:
                rights &= ~removed
        # A carve-out that takes nothing this grant gives needs no split.
        deeper = [(c, r) for c, r in cuts if c != path and r & rights]
        if not is_dir:
            _add(self.rules, path, rights & abi.FS_FILE)
            return []
        if not deeper:
            _add(self.rules, path, rights)
            return []
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
            return []  # cannot list it: its entries get nothing of their own
        inner: list[_Split] = []
        for entry in entries:
            try:
                if entry.is_symlink():
                    continue  # a rule on a link would not govern what it points at
                child_is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue  # gone (or unreadable) since it was listed: it gets nothing
            inner.append((entry.path, rights, below.get(entry.name, []), child_is_dir))
        return inner


_Split = tuple[str, int, list[tuple[str, int]], bool]
"""A folder or file still to split: its path, its rights, the carve-outs beneath it, whether
it is a folder."""


def _add(rules: dict[str, int], path: str, access: int) -> None:
    if access:
        rules[path] = rules.get(path, 0) | access


def build(
    level: int, rules: Iterable[Rule], port: int | None = None, scratch: str | None = None
) -> int:
    """One run's ruleset (its descriptor): every right handled; the shared ``rules`` (reads
    everywhere, the grants), its own ``scratch`` in full, and for a network command one TCP
    connect: to its egress proxy's port (no bind, anywhere).

    Raises:
        SandboxUnavailable: a rule's path changed kind since it was listed (a folder is now
            a file), or the scratch folder is gone; the error names the path.
    """
    handled = abi.fs_rights(level)
    fd = abi.create_ruleset(level, fs=handled, net=abi.net_rights(level), scoped=abi.scopes(level))
    try:
        for rule in rules:
            access = rule.access & handled
            if access:
                _add_rule(fd, rule.path, access)
        if scratch is not None:
            _add_rule(fd, scratch, handled, vanished_ok=False)
        if port is not None:
            abi.add_port_rule(fd, port, abi.NET_CONNECT_TCP)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _add_rule(fd: int, path: str, access: int, *, vanished_ok: bool = True) -> None:
    """Add the rule for ``path`` (resolved when it was listed): skipped if it vanished or
    moved since (a path that is not there needs no grant; one made later gets nothing, and a
    folder swapped for a symlink must not carry the grant to where it points), any other
    failure a structured refusal naming the path. The run's own scratch must be there."""
    try:
        abi.add_path_rule(fd, path, access, exact=vanished_ok)
    except (FileNotFoundError, NotADirectoryError):
        if not vanished_ok:
            raise _unusable(path, "it vanished while the ruleset was built") from None
    except OSError as error:
        raise _unusable(path, error.strerror or str(error)) from error


def _unusable(path: str, why: str) -> SandboxUnavailable:
    return SandboxUnavailable(
        f"Landlock could not add the rule for {path}: {why}",
        hint="something changed this path while the sandbox was being set up; run again, and "
        "look for another process that moves or replaces it",
        details={"path": path, "reason": why},
    )
