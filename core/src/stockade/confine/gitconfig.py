"""What a repository's git config names outside its git folder: hook folders and included files.

Git reads more than ``.git/config``. ``[include] path`` and ``[includeIf "..."] path`` name
other files, relative to the file that includes them (``~`` expanded). Those files are
config too: they may set ``core.hooksPath`` or include more. A command that can write an
included file can set the hooks a person's next ``git commit`` runs, so the survey keeps
every included file inside a writable root read-only, as it keeps ``core.hooksPath``.

Git reads the person's own config too (``~/.gitconfig``, ``$XDG_CONFIG_HOME/git/config``,
``/etc/gitconfig``, or what ``GIT_CONFIG_GLOBAL`` and ``GIT_CONFIG_SYSTEM`` name), and a
``core.hooksPath`` set there, relative, names a folder in every repository
(``.githooks``). So each repository's hook folders come from all of them, resolved against
its worktree, and a folder named but not there yet is kept too (:func:`keep_named`): a
command could make it, and the next ``git commit`` would run what it put there. Git reads
config from the environment as well (``GIT_CONFIG_COUNT`` with its ``GIT_CONFIG_KEY_N``
and ``GIT_CONFIG_VALUE_N``, and ``GIT_CONFIG_PARAMETERS``, which ``git -c`` passes to the
programs it starts): the host's environment is read as the person's, as for the files.
What a person types later (``git -c core.hooksPath=... commit``) cannot be foreseen.

Written by hand: git's own reader is the ``git config`` program, a process per repository
per run; this reads only the two keys that matter, leniently (``key = value`` lines under a
``[section]`` header, comments after ``#`` or ``;``), and follows includes ten deep, as
git does.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from attrs import frozen

from .. import resolved
from ..errors import SandboxUnavailable
from ..resolved import inside

if TYPE_CHECKING:
    from .protected import Kind

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
    stack = [(os.path.join(gitdir, "config"), 0), *((path, 0) for path in personal())]
    for section, key, value in environment():
        if section == "core" and key == "hookspath" and value:
            hooks.append(resolved.realpath(os.path.join(worktree, os.path.expanduser(value))))
        elif key == "path" and (section == "include" or section.startswith("includeif")):
            target = os.path.expanduser(value)
            if os.path.isabs(target):  # (git refuses a relative one from the environment)
                included.append(os.path.normpath(target))
                stack.append((os.path.normpath(target), 1))
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


def personal(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The person's own config files git reads besides a repository's: global and system,
    as ``environ`` names them."""
    home = environ.get("HOME") or os.path.expanduser("~")
    found = []
    if environ.get("GIT_CONFIG_GLOBAL"):
        found.append(environ["GIT_CONFIG_GLOBAL"])
    else:
        xdg = environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
        found += [os.path.join(home, ".gitconfig"), os.path.join(xdg, "git", "config")]
    if environ.get("GIT_CONFIG_NOSYSTEM", "").lower() not in ("1", "true", "yes", "on"):
        found.append(environ.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig")
    return found


def environment(environ: Mapping[str, str] = os.environ) -> list[tuple[str, str, str]]:
    """``(section, key, value)`` of each config entry git takes from ``environ``: the
    ``GIT_CONFIG_COUNT`` pairs and ``GIT_CONFIG_PARAMETERS`` (``'key'='value'`` words, as
    ``git -c`` writes them), section and key lowercased. Malformed ones are skipped (git
    itself then refuses to run, so they name nothing)."""
    pairs: list[tuple[str, str]] = []
    try:
        count = int(environ.get("GIT_CONFIG_COUNT", "0") or "0")
    except ValueError:
        count = 0
    for n in range(min(max(count, 0), 1000)):
        key = environ.get(f"GIT_CONFIG_KEY_{n}")
        if key:
            pairs.append((key, environ.get(f"GIT_CONFIG_VALUE_{n}", "")))
    try:
        words = shlex.split(environ.get("GIT_CONFIG_PARAMETERS", ""))
    except ValueError:
        words = []
    pairs += [(key, value) for key, _, value in (word.partition("=") for word in words)]
    found = []
    for key, value in pairs:
        section, dot, name = key.rpartition(".")
        if dot and section:
            head, _, rest = section.partition(".")
            found.append((head.lower() + (f" {rest}" if rest else ""), name.lower(), value))
    return found


def keep_named(
    gitdir: str, worktree: str, roots: list[str], found: dict[str, Kind], hooks: list[str]
) -> None:
    """Keep what the repository's config (and the person's) names inside ``roots``: each
    ``core.hooksPath`` folder in ``hooks`` (and read-only in ``found`` when it is there),
    each included file read-only.

    Raises:
        SandboxUnavailable: an included file inside a root is missing (a command could
            write it) or reached through a symlink.
    """
    named = references(gitdir, worktree)
    for folder in named.hooks:
        if inside(folder, roots) and folder not in roots:
            hooks.append(folder)
            if os.path.isdir(folder):
                found.setdefault(folder, "read-only")  # hooks outside the .git
    for path in named.included:
        if not inside(path, roots) or path in roots:
            continue
        if resolved.realpath(path) != path or not os.path.isfile(path):
            raise SandboxUnavailable(
                f"{gitdir}/config includes {path}, which is missing or reached through a "
                "symlink in a writable root: a command could write the config it adds",
                hint=f"make {path} a plain file (even an empty one), or remove the include",
                details={"path": path, "gitdir": gitdir},
            )
        found.setdefault(path, "read-only")


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


def gitdir_of(path: str) -> str | None:
    """The directory a ``.git`` file points at; refused when the way there has a symlink."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline().strip()
    except OSError as error:
        raise SandboxUnavailable(
            f"cannot read {path} to protect the repository it names: {error.strerror}",
            hint=f"give it back its read permission (chmod u+r {path})",
            details={"path": path},
        ) from None
    if not first.startswith("gitdir:"):
        return None
    target = os.path.normpath(os.path.join(os.path.dirname(path), first[7:].strip()))
    if resolved.realpath(target) != target:
        raise SandboxUnavailable(
            f"the gitdir of {path} ({target}) is reached through a symlink; refusing to "
            "guess which repository to protect",
            hint="point the gitdir: line at the real directory",
            details={"path": path, "gitdir": target},
        )
    return target if os.path.isdir(target) else None


def keep_around(root: str, roots: list[str], found: dict[str, Kind], hooks: list[str]) -> None:
    """What a repository's config names for a root that is not one itself: the repository
    around it (its ``core.hooksPath`` may name a folder inside the root), and the root as a
    repository to come (``git init`` there later: a relative ``core.hooksPath`` of the
    person's own config names a folder in it), as :func:`keep_named` keeps them."""
    if not os.path.lexists(os.path.join(root, ".git")):
        keep_named(os.path.join(root, ".git"), root, roots, found, hooks)  # the person's
    above = os.path.dirname(root)
    while True:
        mark = os.path.join(above, ".git")
        if os.path.isdir(mark) and not os.path.islink(mark):
            keep_named(mark, above, roots, found, hooks)
            return
        if os.path.isfile(mark) and not os.path.islink(mark):
            gitdir = gitdir_of(mark)
            if gitdir is not None:
                keep_named(gitdir, above, roots, found, hooks)
            return
        if above == os.path.dirname(above):
            return
        above = os.path.dirname(above)
