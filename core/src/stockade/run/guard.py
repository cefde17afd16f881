"""After a command: protected names that appeared are quarantined, protected paths it
changed are put back.

A sandbox can keep a path read-only only if it exists when the command starts (bubblewrap
binds it read-only; Landlock cannot even do that without closing the whole folder above it
to new entries). So the host looks again once the command has exited and all its processes
are gone, while it still holds the workspace:

- every protected name (:mod:`stockade.confine.protected`) that was not there before is moved out
  of the workspace into ``<store>/quarantine/<action_id>/`` plus its original absolute path,
  through folder descriptors opened from the root without following a link
  (:mod:`stockade.run.beneath`): a name whose way there was swapped for a symlink is left
  alone and named in ``failed``, and the look is made again (what the folder held is now
  under another name);
- where the provider did not keep the existing protected paths read-only (``held`` false:
  Landlock), their contents were snapshotted before the run (a ``.git`` less its
  ``objects``); whatever the command added or changed there is quarantined and the
  snapshot put back, bytes, modes and modification times (:mod:`stockade.run.snapshot`).

Commands of one process that run at once on the same roots (a background task and a run)
share one baseline, the one taken before the first of them started: a later one must not
take what the first planted for the original. Across processes there is no such sharing.

The second look relists only the folders whose stamp (inode, mtime, ctime) changed since
the survey; a change time cannot be set back, so an unchanged stamp means unchanged entries.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator

import attrs

from ..confine import protected
from ..confine.protected import Survey
from ..errors import SandboxUnavailable
from ..request.result import Guarded
from . import beneath
from .snapshot import RACY_NS, Snapshot, restore, take


class _Epoch:
    """The baseline of the commands running at once on the same writable roots."""

    def __init__(self, survey: Survey) -> None:
        self.survey = survey
        self.snapshot: Snapshot | None = None
        self.users = 0


_epochs: dict[tuple[str, ...], _Epoch] = {}
_epochs_lock = threading.Lock()


def begin(survey: Survey) -> tuple[Survey, Snapshot | None]:
    """The baseline a command's check must restore to: this survey (and, when the
    provider does not hold the protected paths, their snapshot), or, while another
    command of this process runs on the same roots, the baseline taken before *it*
    started. Otherwise a command started after another had written a hook would take
    the hook for the original, and put it back after the first one's check removed it.
    Pair with :func:`end`.

    Raises:
        SandboxUnavailable: a command of this process runs on overlapping but different
            roots, under a sandbox that puts protected paths back; or the snapshot
            cannot be made (see :func:`take`).
    """
    with _epochs_lock:
        epoch = _epochs.get(survey.roots)
        if epoch is None:
            for roots, other in _epochs.items():
                if _overlap(roots, survey.roots) and not (survey.held and other.survey.held):
                    raise SandboxUnavailable(
                        f"another command is running in {', '.join(roots)}, which overlaps "
                        f"{', '.join(survey.roots)}; its protected paths are put back after "
                        "it, so this one must wait",
                        hint="run it once the other command has ended, or in the same folder",
                        details={"running": list(roots), "roots": list(survey.roots)},
                    )
            epoch = _Epoch(survey)
        if not survey.held and epoch.snapshot is None:
            # Under a held epoch the paths it found were read-only: still the originals.
            epoch.snapshot = take(
                attrs.evolve(
                    epoch.survey,
                    snapshot_limit=survey.snapshot_limit,
                    snapshot_setting=survey.snapshot_setting,
                )
            )
        epoch.users += 1
        _epochs[survey.roots] = epoch
        return epoch.survey, epoch.snapshot


def end(survey: Survey) -> None:
    """A command that :func:`begin` returned a baseline for has been checked."""
    with _epochs_lock:
        epoch = _epochs.get(survey.roots)
        if epoch is not None:
            epoch.users -= 1
            if epoch.users <= 0:
                del _epochs[survey.roots]


def _overlap(first: tuple[str, ...], second: tuple[str, ...]) -> bool:
    return any(protected.inside(a, [b]) or protected.inside(b, [a]) for a in first for b in second)


def check(survey: Survey, snapshot: Snapshot | None, folder: str) -> Guarded:
    """Quarantine into ``folder`` the protected names that appeared under the survey's
    roots, and put back what changed in its read-only paths when ``snapshot`` is given."""
    moved: list[str] = []
    restored: list[str] = []
    failed: list[str] = []
    known = {*survey.read_only, *survey.masked}
    for _ in range(_PASSES):
        swapped = False
        for path in _appeared(survey):
            if path not in known and path not in moved:
                swapped |= not beneath.move(path, folder, survey.roots, moved, failed) and (
                    _swapped(path, survey.roots)
                )
        if not swapped:
            break  # a folder swapped for a link under a name: look again beside the link
    if snapshot is not None:
        restore(snapshot, folder, moved, restored, failed, roots=survey.roots)
    return Guarded(tuple(moved), tuple(restored), folder if moved else None, tuple(failed))


_PASSES = 3
"""Looks after a run at most: another follows one that met a folder swapped for a link (a
process still running moved it aside, so what it held is now under another name)."""


def _swapped(path: str, roots: tuple[str, ...]) -> bool:
    try:
        beneath.lstat(path, roots)
    except beneath.Swapped:
        return True
    except OSError:
        return False
    return False


def _appeared(survey: Survey) -> Iterator[str]:
    """Every protected path under the roots now, relisting only changed folders."""
    dotfiles = survey.writable_dotfiles
    before = {f.path: f for f in survey.folders}
    bare = set(survey.bare)
    stack = [r for r in survey.roots if protected.enclosing(r, dotfiles) is None]
    while stack:
        directory = stack.pop()
        try:
            info = os.stat(directory, follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode):
            continue
        old = before.get(directory)
        if (
            old is not None
            and old.stamp == protected.stamp(info)
            and info.st_ctime_ns < survey.started - RACY_NS
        ):
            stack += [os.path.join(directory, name) for name in old.children]
            continue
        entries = _list(directory, survey.roots)
        if protected.git_dir(e.name for e in entries):
            root = directory in survey.roots
            yield from _bare(directory, entries, known=directory in bare, root=root)
            continue
        for entry in entries:
            if protected.kind_of(entry.path, dotfiles) is not None:
                yield entry.path
            elif entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)


def _bare(
    directory: str, entries: list[os.DirEntry[str]], *, known: bool, root: bool
) -> Iterator[str]:
    """What to quarantine of a folder git takes for a repository: a new one whole (a new
    one at a root, its git entries: the root stays); of a known one, new hooks or config."""
    if known:
        yield from (e.path for e in entries if e.name in protected.BARE_KEPT)
    elif root:
        marks = protected.GIT_DIR_MARKS | set(protected.BARE_KEPT)
        yield from (e.path for e in entries if e.name in marks)
    else:
        yield directory


def _list(directory: str, roots: tuple[str, ...]) -> list[os.DirEntry[str]]:
    """The entries of ``directory``; its owner's rights are given back first if a
    command took them away to hide what it planted. Nothing when it is gone."""
    try:
        return list(os.scandir(directory))
    except PermissionError:
        beneath.openable(directory, roots)
    except OSError:
        return []
    try:
        return list(os.scandir(directory))
    except OSError:
        return []
