"""What a layer would do to its root, without doing any of it.

A dry run and a landing that waits for a person (``commit = "ask"``) show this list: what
would be created, changed and deleted, which protected names landing would send to the
quarantine (:func:`stockade.confine.protected.kind_of`, and a new folder git would take for
a repository), and which paths were changed in the real root since the command started
(landing keeps the layer's version aside). It follows the rules of
:mod:`stockade.layers.commit` in the same order; nothing is opened for writing (a folder
the command hid from its owner is given ``u+rwx`` back, as landing gives it). The layer is
walked by descriptors, however deep (:func:`~stockade.layers.place.walk`); as in landing,
a folder nested deeper than :data:`~stockade.layers.commit.DEPTH` is named in ``failed``
and what it holds is not listed, nor is a path longer than ``PATH_MAX`` (``failed`` says
where they begin).
"""

from __future__ import annotations

import os
import stat

from ..confine import protected
from ..resolved import inside
from ..trees import PATH_MAX, walk
from . import clearing
from .commit import DEPTH, marks, whiteout
from .place import Layer
from .rules import Rules, Tally


def survey(layers: tuple[Layer, ...], rules: Rules) -> Tally:
    """What landing ``layers`` under ``rules`` would do (paths absolute; folders end in
    ``/``); a protected name, a conflict and everything they hold are listed once, by name."""
    tally = Tally()
    for layer in layers:
        _walk(layer.upper, layer.root, rules, tally)
    return tally


def _walk(upper: str, root: str, rules: Rules, tally: Tally) -> None:
    """Each entry of ``upper`` (folders by descriptor, however deep: :func:`walk`) as
    landing would take it into ``root``; a path longer than :data:`PATH_MAX` (its name,
    or what a folder holds below it) is not listed, and ``failed`` names where that began."""
    for visit in walk(upper, own=True):
        if visit.rel is None:  # (never: no folder of a longer path is walked into)
            visit.folders.clear()
            continue
        base = os.path.join(root, visit.rel) if visit.rel else root
        folders = set(visit.folders)
        descend, cut = [], False
        for name in sorted((*visit.folders, *visit.others)):
            target = os.path.join(base, name)
            if len(target) >= PATH_MAX:
                cut = True
                continue
            folder = name in folders
            if _one(visit.fd, name, target, rules, tally, folder=folder, depth=visit.depth):
                descend.append(name)
        if cut:
            tally.failed.append(f"{base}/: {TOO_LONG}")
        visit.folders[:] = descend


TOO_LONG = f"holds paths longer than PATH_MAX ({PATH_MAX}); they are not listed"
"""What ``failed`` says of a folder whose entries' paths are too long to be listed."""


def _one(
    fd: int, name: str, target: str, rules: Rules, tally: Tally, *, folder: bool, depth: int
) -> bool:
    """Entry ``name`` of an upper folder (descriptor ``fd``, ``depth`` folders below the
    upper), as landing would take it to ``target``; whether to look inside (a folder that
    lands)."""
    slash = "/" if folder else ""
    try:
        below = os.lstat(target)
    except OSError:
        below = None
    if not folder and below is not None and rules.since and below.st_ctime_ns > rules.since:
        tally.conflicts.append(target)
        return False
    source = f"/proc/self/fd/{fd}/{name}"  # the folder by its descriptor; ``name`` not followed
    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
    marked = marks(source)
    if not folder and whiteout(info, marked):
        if below is not None:
            _deleted(target, rules, tally)
        return False
    if (
        protected.kind_of(target, rules.dotfiles) is not None
        or inside(target, rules.hooks)
        or (folder and below is None and _repository(source))
    ):
        tally.quarantined.append(target + slash)
        return False
    if folder and depth >= DEPTH:
        tally.failed.append(f"{target}: nested deeper than {DEPTH} folders; not landed")
        return False
    if below is not None and folder != stat.S_ISDIR(below.st_mode):  # a file for a folder
        if not _replaced(target, below, rules, tally):
            return False
        below = None
    if below is None:
        tally.created.append(target + slash)
    elif not folder:
        tally.modified.append(target)
    elif marked.get("opaque") == b"y" and os.path.isdir(target):
        for inner in sorted(os.listdir(target)):  # what the root holds there goes
            _deleted(os.path.join(target, inner), rules, tally)
    return folder


def _replaced(target: str, below: os.stat_result, rules: Rules, tally: Tally) -> bool:
    """A real file where the layer has a folder, or a real folder where it has a file, as
    landing takes it: deleted first (listed), unless it changed since the command began
    (a conflict: the layer's version is kept aside); whether the layer's lands."""
    if stat.S_ISDIR(below.st_mode):
        tree = _deleted(target, rules, tally)
        if tree is None:
            return False
        tally.deleted[-1:] = tree  # the whole tree, as landing lists it
        return True
    if rules.since and clearing.changed_since(below, rules.since):
        tally.conflicts.append(target)
        return False
    tally.deleted.append(target)
    return True


def _deleted(target: str, rules: Rules, tally: Tally) -> list[str] | None:
    """The real ``target`` as landing would delete it: listed as deleted, or, when
    :func:`~stockade.layers.clearing.kept_by` keeps it, named as landing names it
    (:func:`~stockade.layers.clearing.note`). What it holds, as a tally lists it
    (``None``: it stays, or is not there)."""
    try:
        parent = os.open(os.path.dirname(target), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        kept, found = clearing.judged(parent, os.path.basename(target), target, rules)
    finally:
        os.close(parent)
    if kept is not None:
        clearing.note(target, kept, tally)
        return None
    if not found:
        return None
    tally.deleted.append(target + ("/" if stat.S_ISDIR(found[0][1].st_mode) else ""))
    return clearing.listed(found)


def _repository(path: str) -> bool:
    try:
        return protected.git_dir(os.listdir(path))
    except OSError:
        return False
