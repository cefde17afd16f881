"""Landing a layer: what a command wrote, applied to the real root once the host checked it.

Everything a command wrote in a layered root is in its upper folder (the kernel's overlay
put it there); nothing else changed. :func:`land` walks that folder, which no process can
touch any more (the command and all its descendants are gone), and applies each entry to
the real root in one place, with every rule on the way:

- the root is walked through folder descriptors, each opened with ``O_NOFOLLOW`` from the
  one above (:mod:`stockade.run.beneath`'s discipline): a folder swapped for a symlink while
  the commit runs (by another program) stops that branch, named in ``failed``; nothing is
  ever written through a link;
- a protected name (:func:`stockade.confine.protected.kind_of`: ``.git``, agent and editor
  config, dotfiles, run-later folders, credential stores) never lands, at any depth: it goes
  to the quarantine, as does a folder that git would take for a repository (``HEAD``,
  ``objects``, ``refs``) and a known bare repository's new hooks or config;
- a deletion (a whiteout: a ``0,0`` character device, or a file marked
  ``overlay.whiteout``) removes the name; an opaque folder (``overlay.opaque = y``) first
  loses what the root held there; a folder replaced by a file (or back) is handled both ways;
- files, symlinks and other entries land by ``rename`` (same filesystem: no copy, modes,
  times, links and symlinks as the command left them; into a fork mounted as an overlay,
  a copy beside the name renamed over it: :mod:`~stockade.layers.across`); folders take
  the upper's mode, with the owner's rights (``u+rwx``) kept, as the check after a direct
  run gives them back;
- an entry the overlay marked in a way the host does not apply (``redirect``,
  ``metacopy``) is refused, named in ``failed``.

Landing is idempotent: each entry leaves the upper folder when it has landed (a whiteout
after its deletion, an opaque mark after the folder was emptied), so landing again what is
left of a layer finishes an interrupted commit (:mod:`stockade.layers.journal`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat

from .. import owned
from ..confine import protected
from ..resolved import inside
from ..tree_copy import copy_tree
from ..trees import open_folder, remove_at
from . import across, clearing
from .place import Layer
from .rules import Rules, Tally

__all__ = ["Rules", "Tally", "land", "marks", "whiteout"]  # Rules, Tally: from .rules

DEPTH = 256
"""How deep a layer's folders land (the walk recurses; Linux paths reach 2,048 levels): a
folder deeper is named in ``failed``, and what it holds stays out."""
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PREFIXES = ("trusted.overlay.", "user.overlay.")


def _marks(fd: int, name: str) -> dict[str, bytes]:
    return marks(f"/proc/self/fd/{fd}/{name}")


def marks(path: str) -> dict[str, bytes]:
    """The overlay's marks on ``path`` (``opaque``, ``whiteout``, ``redirect``, ...)."""
    found: dict[str, bytes] = {}
    try:
        keys = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return found
    for key in keys:
        for prefix in _PREFIXES:
            if key.startswith(prefix):
                with contextlib.suppress(OSError):
                    found[key[len(prefix) :]] = os.getxattr(path, key, follow_symlinks=False)
    return found


def whiteout(info: os.stat_result, marks: dict[str, bytes]) -> bool:
    """Whether an upper entry stands for a deletion."""
    if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:
        return True
    return stat.S_ISREG(info.st_mode) and info.st_size == 0 and "whiteout" in marks


def land(layer: Layer, rules: Rules, tally: Tally) -> None:
    """Apply ``layer`` to its root (see the module's docstring); what it did goes in ``tally``.

    Raises:
        OSError: the root or the upper folder cannot be opened.
    """
    root = os.open(layer.root, _DIR)
    try:
        upper = _open_dir(os.open(layer.folder, _DIR), "upper", close=True)
    except BaseException:
        os.close(root)
        raise
    try:
        os.fchmod(upper, 0o700)  # the command may have chmodded its root (that mode stays its)
        xwhite = marks(f"/proc/self/fd/{upper}").get("opaque") == b"x"
        _merge(upper, root, layer.root, rules, tally, top=True, xwhite=xwhite)
    finally:
        os.close(upper)
        os.close(root)


def _open_dir(fd: int, name: str, *, close: bool = False) -> int:
    """Folder ``name`` in ``fd``, not followed; a folder of this user whose rights the
    command took away is given them back first. ``close``: ``fd`` is closed after."""
    try:
        return open_folder(fd, name, own=True)  # (r without x too: it lists, cannot stat)
    finally:
        if close:
            os.close(fd)


def _lstat(fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _names(fd: int) -> list[str]:
    return sorted(os.listdir(fd))


def _merge(
    up: int,
    dst: int,
    path: str,
    rules: Rules,
    tally: Tally,
    *,
    top: bool,
    xwhite: bool = False,
    depth: int = 0,
) -> None:
    """Land the entries of upper folder ``up`` into real folder ``dst`` (at ``path``).

    Only folders carry the overlay's marks (``opaque``, ``redirect``), and files only in a
    folder marked ``opaque = x`` (the newer kernels' whiteout files): the others are not
    asked, nor stat-ed but for a character device (a whiteout)."""
    with os.scandir(up) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    kept = _git_marks(up, dst, path, [e.name for e in entries], rules, top=top)
    for entry in entries:
        name = entry.name
        target = os.path.join(path, name)
        folder = entry.is_dir(follow_symlinks=False)
        odd = not folder and not entry.is_symlink() and (xwhite or not entry.is_file())
        info = entry.stat(follow_symlinks=False) if folder or odd else None
        marks = _marks(up, name) if folder or (xwhite and entry.is_file()) else {}
        if "redirect" in marks or "metacopy" in marks:
            tally.failed.append(f"{target}: an overlay redirect or metacopy; not applied")
            continue
        below = None if folder else _lstat(dst, name)
        if below is not None and rules.since and clearing.changed_since(below, rules.since):
            _quarantine(up, name, target, rules, tally, aside="conflicts")
            continue
        if info is not None and whiteout(info, marks):
            _delete(up, dst, name, target, rules=rules, tally=tally)
            continue
        if (
            name in kept
            or protected.kind_of(target, rules.dotfiles) is not None
            or inside(target, rules.hooks)
        ):
            _quarantine(up, name, target, rules, tally)
            continue
        if folder and _new_repository(up, dst, name):
            _quarantine(up, name, target, rules, tally)
        elif folder:
            assert info is not None  # noqa: S101 - stat-ed above for every folder
            if depth >= DEPTH:
                tally.failed.append(f"{target}: nested deeper than {DEPTH} folders; not landed")
                continue
            _folder(
                up, dst, name, target, info=info, marks=marks, rules=rules, tally=tally, depth=depth
            )
        else:
            _entry(up, dst, name, target, below=below, tally=tally, rules=rules)


def _new_repository(up: int, dst: int, name: str) -> bool:
    """Whether upper folder ``name`` is new to the root and git would take it for a
    repository: it goes whole."""
    if _lstat(dst, name) is not None:
        return False
    try:
        return protected.git_dir(os.listdir(f"/proc/self/fd/{up}/{name}"))
    except OSError:
        return False


def _git_marks(
    up: int, dst: int, path: str, names: list[str], rules: Rules, *, top: bool
) -> frozenset[str]:
    """The upper names in a folder that make (or keep) it a repository: they never land."""
    if path in rules.bare:
        return frozenset(n for n in names if n in protected.BARE_KEPT)
    marks = protected.GIT_DIR_MARKS | set(protected.BARE_KEPT)
    if marks.isdisjoint(names):
        return frozenset()  # the layer adds none of a repository's own names here
    try:
        below = set(os.listdir(dst))
    except OSError:
        below = set()
    if not protected.git_dir(below | set(names)):
        return frozenset()
    if top or below:  # the folder exists: its own files stay, the new marks go
        return frozenset(n for n in names if n in marks)
    return frozenset(names)


def _delete(up: int, dst: int, name: str, target: str, *, rules: Rules, tally: Tally) -> None:
    """A whiteout: remove ``name`` from the root (unless it is, or holds, what the command
    may not delete: :func:`.clearing.remove_unless`), then the whiteout itself."""
    try:
        clearing.remove_unless(dst, name, target, rules, tally)
    except OSError as error:
        tally.failed.append(f"{target}: not deleted: {error.strerror}")
        return
    os.unlink(name, dir_fd=up)


def _folder(
    up: int,
    dst: int,
    name: str,
    target: str,
    *,
    info: os.stat_result,
    marks: dict[str, bytes],
    rules: Rules,
    tally: Tally,
    depth: int = 0,
) -> None:
    """A folder of the upper: made (or emptied when opaque) in the root, then merged."""
    opened = _real_folder(up, dst, name, target, rules=rules, tally=tally)
    if opened is None:
        return
    inner_dst, below = opened
    try:
        if marks.get("opaque") == b"y":
            if below is not None:
                clearing.empty(inner_dst, target, rules, tally)
            _unmark(up, name)
        inner_up = _open_dir(up, name)
        # The command may have taken its own rights away (chmod 644 on a folder): the host
        # needs them in both folders while it lands; the folder's own mode is set last.
        os.fchmod(inner_up, 0o700)
        was = stat.S_IMODE(os.fstat(inner_dst).st_mode)
        if was & 0o700 != 0o700:
            os.fchmod(inner_dst, was | 0o700)
        try:
            xwhite = marks.get("opaque") == b"x"
            _merge(
                inner_up, inner_dst, target, rules, tally, top=False, xwhite=xwhite, depth=depth + 1
            )
        finally:
            os.close(inner_up)
        # A folder lands with its owner's rights, whatever the command left: one it hid
        # from the owner would hide a planted .git from the next run's survey.
        mode = stat.S_IMODE(info.st_mode) | 0o700
        if below is None or stat.S_IMODE(below.st_mode) != mode or was & 0o700 != 0o700:
            os.fchmod(inner_dst, mode)
            if below is not None and stat.S_IMODE(below.st_mode) != mode:
                tally.modified.append(target + "/")
    finally:
        os.close(inner_dst)


def _real_folder(
    up: int, dst: int, name: str, target: str, *, rules: Rules, tally: Tally
) -> tuple[int, os.stat_result | None] | None:
    """The root's folder for upper folder ``name``, opened, with what was there before
    (``None``: made now). A file there is unlinked first, unless it was edited since the
    command began: the layer's folder is then kept aside (a conflict). ``None``: nothing
    of the layer's folder lands (the tally says why)."""
    below = _lstat(dst, name)
    if below is not None and not stat.S_ISDIR(below.st_mode):
        if rules.since and clearing.changed_since(below, rules.since):
            _quarantine(up, name, target, rules, tally, aside="conflicts")
            return None
        os.unlink(name, dir_fd=dst)
        tally.deleted.append(target)
        below = None
    if below is None:
        try:
            os.mkdir(name, 0o700, dir_fd=dst)
            tally.created.append(target + "/")
        except FileExistsError:
            pass  # made meanwhile by a racing swap: opened below, never followed
    try:
        return _open_dir(dst, name), below
    except OSError as error:
        # A link now (ELOOP, ENOTDIR), or gone for a moment while another process swaps it
        # (ENOENT): what the layer holds below it is not landed, and the tally says so.
        if error.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
            raise
        tally.failed.append(f"{target}: swapped or moved during the commit; left alone")
        return None


def _unmark(up: int, name: str) -> None:
    """Take the opaque mark off an upper folder once the root's folder was emptied."""
    path = f"/proc/self/fd/{up}/{name}"
    for prefix in _PREFIXES:
        with contextlib.suppress(OSError):
            os.removexattr(path, prefix + "opaque", follow_symlinks=False)


def _entry(
    up: int,
    dst: int,
    name: str,
    target: str,
    *,
    below: os.stat_result | None,
    tally: Tally,
    rules: Rules,
) -> None:
    """A file, symlink or other non-folder: renamed into the root over what is there
    (``below``, as it was just looked at)."""
    if below is not None and stat.S_ISDIR(below.st_mode):
        if clearing.kept_by(dst, name, target, rules) is not None:  # changed, or protected
            _quarantine(up, name, target, rules, tally, aside="conflicts")
            return
        fd = _open_dir(dst, name)
        try:
            clearing.empty(fd, target, rules, tally)
        finally:
            os.close(fd)
        try:
            os.rmdir(name, dir_fd=dst)
        except OSError as error:
            tally.failed.append(f"{target}: the folder there stays: {error.strerror}")
            return
        tally.deleted.append(target + "/")
        below = None
    try:
        across.drop_privileges(up, name)  # (capabilities it cannot remove: not landed)
    except OSError as failed:
        tally.failed.append(f"{target}: not landed: {failed.strerror}")
        return
    try:
        os.rename(name, name, src_dir_fd=up, dst_dir_fd=dst)
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
        try:
            across.carry(up, dst, name)  # a fork mounted as an overlay: another filesystem
        except OSError as failed:
            tally.failed.append(f"{target}: not landed: {failed.strerror}")
            return
    (tally.created if below is None else tally.modified).append(target)


def _quarantine(
    up: int, name: str, target: str, rules: Rules, tally: Tally, *, aside: str = ""
) -> None:
    """A protected name (or, ``aside = "conflicts"``, a conflicting version): moved from the
    upper folder to the quarantine, never to the root."""
    where = os.path.join(rules.quarantine, aside, target.lstrip("/"))
    owned.private(rules.quarantine)
    os.makedirs(os.path.dirname(where), mode=0o700, exist_ok=True)
    while os.path.lexists(where):
        where += "~"
    source = f"/proc/self/fd/{up}/{name}"
    try:
        os.rename(name, where, src_dir_fd=up)
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
        if os.path.isdir(source) and not os.path.islink(source):
            copy_tree(source, where)  # without recursion: a command made this tree
            remove_at(up, name)
        else:
            shutil.copy2(source, where, follow_symlinks=False)
            os.unlink(name, dir_fd=up)
    (tally.conflicts if aside else tally.quarantined).append(target)
