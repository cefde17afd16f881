"""A skill's files: which exist, which may be read, which may run, and their copy for a run.

Reading happens in the host's process, outside any sandbox, so a resource is only ever a
regular file inside the skill's directory: no ``..``, no absolute path, no symbolic link that
leaves the skill, and no hard-linked file (its other name may be anywhere, so its content
may be anything: a key, a token). The copy made for a run keeps to the same rules, so
nothing from outside the skill is carried into the sandbox by the host.

Which entries may run: those under ``scripts/`` and under any folder the specification does
not name; never ``references/``, ``assets/`` or a file at the skill's top.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from typing import Literal

from stockade import resolved
from stockade.trees import PATH_MAX, remove_tree, walk

from .errors import BadResource
from .model import Skill

Kind = Literal["script", "reference", "asset", "root", "other"]
STANDARD: dict[str, Kind] = {"scripts": "script", "references": "reference", "assets": "asset"}
MAX_FILES = 2_000
MAX_BYTES = 64 * 1024 * 1024
READ_MAX = 8 * 1024 * 1024


def kind_of(resource: str) -> Kind:
    """What part of a skill ``resource`` (a relative path) is."""
    parts = resource.split("/")
    if len(parts) == 1:
        return "root"
    return STANDARD.get(parts[0], "other")


def executable(resource: str) -> bool:
    """Whether the resource may be run: ``scripts/`` and non-standard entries only."""
    return kind_of(resource) in ("script", "other")


def resolve(skill: Skill, resource: str) -> str:
    """The file ``resource`` names inside ``skill``.

    Raises:
        BadResource: the path is malformed, leaves the skill, or is not a plain file there.
    """
    details = {"skill": skill.name, "resource": resource}
    parts = resource.split("/")
    if not resource or resource.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise BadResource(
            f"resource {resource!r} of skill {skill.name!r} must be a relative path inside it, "
            "with no '.', '..' or empty parts",
            hint="name it as listed by `stockade skill show SKILL`, e.g. scripts/run.py",
            details=details,
        )
    path = os.path.join(skill.root, *parts)
    real = resolved.realpath(path)
    if os.path.commonpath((real, skill.root)) != skill.root:
        raise BadResource(
            f"resource {resource!r} of skill {skill.name!r} leads outside the skill ({real})",
            hint="a skill's files must lie inside its directory; remove the link",
            details={**details, "target": real},
        )
    try:
        info = os.stat(real)
    except OSError:
        raise BadResource(
            f"skill {skill.name!r} has no resource {resource!r}",
            hint="`stockade skill show SKILL` lists its files",
            details=details,
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise BadResource(
            f"resource {resource!r} of skill {skill.name!r} is not a plain file",
            hint="name a file, as listed by `stockade skill show SKILL`",
            details=details,
        )
    if info.st_nlink > 1:
        raise BadResource(
            f"resource {resource!r} of skill {skill.name!r} is a hard link, so its content may "
            "be any file's; it is neither read nor run",
            hint="replace it with a copy of its own",
            details=details,
        )
    return real


def listing(skill: Skill) -> list[str]:
    """The skill's files, as relative paths, sorted; at most :data:`MAX_FILES`."""
    found: list[str] = []
    for visit in walk(skill.root):  # without recursion: a project's skill may be any depth
        if visit.rel is None:  # past PATH_MAX: no path names what is there
            visit.folders.clear()
            continue
        visit.folders[:] = [d for d in visit.folders if not d.startswith(".")]
        for name in visit.others:
            if _is_folder(visit.fd, name):
                continue  # a link to a folder, as os.walk sorts it
            found.append(f"{visit.rel}/{name}" if visit.rel else name)
            if len(found) >= MAX_FILES:
                return found
    return found


def _is_folder(fd: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=fd).st_mode)
    except OSError:
        return False


def read_text(path: str) -> str:
    """A file's text (UTF-8, undecodable bytes replaced); a binary file is described."""
    with open(path, "rb") as handle:
        data = handle.read(READ_MAX + 1)
    if b"\0" in data[:8192]:
        return f"[binary file, {os.path.getsize(path)} bytes: not shown]"
    text = data[:READ_MAX].decode("utf-8", "replace")
    if len(data) > READ_MAX:
        text += f"\n[... file is over {READ_MAX} bytes; the rest is not read]"
    return text


def materialize(skill: Skill, into: str) -> tuple[str, list[str]]:
    """Copy ``skill`` into ``into/NAME``; returns that root and what was left out, and why.

    Plain files and folders are copied (mode bits kept, owner's write added); a symbolic link
    is kept only when it points inside the skill; hard-linked files, devices, sockets and
    pipes are left out.

    Raises:
        BadResource: the skill holds more than :data:`MAX_FILES` entries or :data:`MAX_BYTES`.
    """
    root = os.path.join(into, skill.name)
    left_out: list[str] = []
    count = size = 0
    for visit in walk(skill.root):  # without recursion: a project's skill may be any depth
        if visit.rel is None or len(os.path.join(root, visit.rel)) >= PATH_MAX:
            raise BadResource(
                f"skill {skill.name!r} is too deep to run from (a path over {PATH_MAX} bytes)",
                hint="keep a skill's folders shallow",
                details={"skill": skill.name},
            )
        relative = visit.rel or "."
        top = os.path.join(skill.root, visit.rel) if visit.rel else skill.root
        target_dir = root if relative == "." else os.path.join(root, relative)
        os.makedirs(target_dir, mode=0o755, exist_ok=True)
        for name in visit.others:
            source, target = os.path.join(top, name), os.path.join(target_dir, name)
            shown = name if relative == "." else f"{relative}/{name}"
            count += 1
            info = os.lstat(source)
            if count > MAX_FILES or size + info.st_size > MAX_BYTES:
                raise BadResource(
                    f"skill {skill.name!r} is too large to run from "
                    f"(over {MAX_FILES} files or {MAX_BYTES // 2**20} MiB)",
                    hint="keep data a script needs small, or fetch it in the script",
                    details={"skill": skill.name},
                )
            if stat.S_ISLNK(info.st_mode):
                real = resolved.realpath(source)
                if os.path.commonpath((real, skill.root)) == skill.root:
                    os.symlink(os.readlink(source), target)
                else:
                    left_out.append(f"{shown}: a link that leads outside the skill")
            elif not stat.S_ISREG(info.st_mode):
                left_out.append(f"{shown}: not a plain file")
            elif info.st_nlink > 1:
                left_out.append(f"{shown}: a hard link (its content may be any file's)")
            else:
                shutil.copyfile(source, target, follow_symlinks=False)
                os.chmod(target, stat.S_IMODE(info.st_mode) | stat.S_IWUSR | stat.S_IRUSR)
                size += info.st_size
    return root, left_out


def remove(tree: str) -> None:
    """Remove ``tree`` whatever a script did to the permissions of its folders (each gets
    its owner's rights back) or to its depth (:func:`stockade.trees.remove_tree`, without
    recursion).

    Raises:
        OSError: something in it could not be removed.
    """
    remove_tree(tree)
    if os.path.lexists(tree):
        raise OSError(errno.ENOTEMPTY, "a skill's copy could not be removed", tree)
