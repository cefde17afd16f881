"""What a repository's git config names outside its git folder: hook folders and included files.

Git reads more than ``.git/config``. ``[include] path`` and ``[includeIf "..."] path`` name
other files, relative to the file that includes them (``~`` expanded). Those files are
config too: they may set ``core.hooksPath`` or include more. A command that can write an
included file can set the hooks a person's next ``git commit`` runs, so the survey keeps
every included file inside a writable root read-only, as it keeps ``core.hooksPath``.

Written by hand: git's own reader is the ``git config`` program, a process per repository
per run; this reads only the two keys that matter, leniently (``key = value`` lines under a
``[section]`` header, comments after ``#`` or ``;``), and follows includes ten deep, as
git does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from attrs import frozen

from .. import resolved

DEPTH = 10
"""How deep includes are followed (git's own limit)."""


@frozen
class References:
    """What one repository's config names.

    Attributes:
        hooks: every ``core.hooksPath`` set in the config or a file it includes, resolved
            against the worktree.
        included: every file included (``include.path``, ``includeIf.*.path``), followed
            through included files, each as written (normalised, not resolved).
    """

    hooks: tuple[str, ...]
    included: tuple[str, ...]


def references(gitdir: str, worktree: str) -> References:
    """What the config of the repository in ``gitdir`` (its worktree ``worktree``) names;
    files that cannot be read name nothing (git skips a missing include too)."""
    hooks: list[str] = []
    included: list[str] = []
    seen: set[str] = set()
    stack = [(os.path.join(gitdir, "config"), 0)]
    while stack:
        path, depth = stack.pop()
        if path in seen or depth > DEPTH:
            continue
        seen.add(path)
        for section, key, value in _entries(path):
            if section == "core" and key == "hookspath" and value:
                hooks.append(resolved.realpath(os.path.join(worktree, os.path.expanduser(value))))
            elif (
                key == "path"
                and value
                and (section == "include" or section.startswith("includeif"))
            ):
                target = os.path.normpath(
                    os.path.join(os.path.dirname(path), os.path.expanduser(value))
                )
                included.append(target)
                stack.append((target, depth + 1))
    return References(tuple(dict.fromkeys(hooks)), tuple(dict.fromkeys(included)))


def _entries(path: str) -> Iterator[tuple[str, str, str]]:
    """``(section, key, value)`` of each ``key = value`` line of a config file, section and
    key lowercased (a subsection keeps its quotes), the value unquoted."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return
    section = ""
    for raw in lines:
        line = raw.strip()
        if line.startswith("["):
            section = line[1:].split("]", 1)[0].strip().lower()
            line = line.split("]", 1)[1].strip() if "]" in line else ""
        key, eq, value = line.partition("=")
        if eq:
            value = value.split("#", 1)[0].split(";", 1)[0].strip().strip('"')
            yield section, key.strip().lower(), value
