"""What a layer would do to its root, without doing any of it.

A dry run and a landing that waits for a person (``commit = "ask"``) show this list: what
would be created, changed and deleted, which protected names landing would send to the
quarantine (:func:`stockade.confine.protected.kind_of`, and a new folder git would take for
a repository), and which paths were changed in the real root since the command started
(landing keeps the layer's version aside). It follows the rules of
:mod:`stockade.layers.commit` in the same order; nothing is opened for writing.
"""

from __future__ import annotations

import os

from ..confine import protected
from .commit import Rules, Tally, marks, whiteout
from .place import Layer


def survey(layers: tuple[Layer, ...], rules: Rules) -> Tally:
    """What landing ``layers`` under ``rules`` would do (paths absolute; folders end in
    ``/``); a protected name, a conflict and everything they hold are listed once, by name."""
    tally = Tally()
    for layer in layers:
        _walk(layer.upper, layer.root, rules, tally)
    return tally


def _walk(upper: str, root: str, rules: Rules, tally: Tally) -> None:
    for directory, folders, files in os.walk(upper):
        rel = os.path.relpath(directory, upper)
        descend = []
        for name in sorted((*folders, *files)):
            folder = name in folders
            target = os.path.normpath(os.path.join(root, rel, name))
            if not _one(os.path.join(directory, name), target, rules, tally, folder=folder):
                continue
            if folder:
                descend.append(name)
        folders[:] = descend


def _one(source: str, target: str, rules: Rules, tally: Tally, *, folder: bool) -> bool:
    """File ``source`` of an upper folder, as landing would take it; whether to look inside."""
    slash = "/" if folder else ""
    try:
        below = os.lstat(target)
    except OSError:
        below = None
    if not folder and below is not None and rules.since and below.st_ctime_ns > rules.since:
        tally.conflicts.append(target)
        return False
    info = os.lstat(source)
    if not folder and whiteout(info, marks(source)):
        if below is not None:
            tally.deleted.append(target)
        return False
    if protected.kind_of(target, rules.dotfiles) is not None or (
        folder and below is None and _repository(source)
    ):
        tally.quarantined.append(target + slash)
        return False
    if below is None:
        tally.created.append(target + slash)
    elif not folder:
        tally.modified.append(target)
    return True


def _repository(path: str) -> bool:
    try:
        return protected.git_dir(os.listdir(path))
    except OSError:
        return False
