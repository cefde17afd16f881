"""A command's layers from the start of its run to their landing (or discarding).

    begin: the journal says ``running``           (the command writes into its layers)
    end:   decide: land (``commit``, quota) or not, or wait for a person (``ask``)
           the journal says ``landing``; each layer landed; the layers and journal removed
           -> Landing: what changed, what was quarantined, what failed, why nothing landed
    (waiting: the journal says ``waiting``; the layers stay until a person's answer,
    :mod:`stockade.layers.waiting`)

The changed-files list is the layers themselves: exact, no watch, no scan, no bound on the
workspace's size.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from typing import Literal

from attrs import frozen

from ..request.result import Changes, Guarded
from ..trees import own_folder, walk
from . import clock, journal
from .commit import Rules, Tally, land
from .place import Layer, aside, discard
from .survey import survey

Kept = Literal["landed", "discarded", "over-quota", "waiting"]

_landed: dict[str, str] = {}
"""Path -> the command whose landing last changed it, in this process (names a conflict's
other side); bounded by :data:`_REMEMBERED`."""
_REMEMBERED = 100_000
_landed_lock = threading.Lock()


@frozen
class Landing:
    """What became of a command's layers.

    Attributes:
        kept: ``landed``, ``discarded`` (its ``commit`` choice, or a dry run),
            ``over-quota`` (landing would take its workspace past its quota: nothing landed)
            or ``waiting`` (kept for a person's answer, ``commit = "ask"``).
        changes: what changed in the roots (or would have, when nothing landed).
        guarded: protected names sent to the quarantine, and what failed.
    """

    kept: Kept
    changes: Changes
    guarded: Guarded | None = None


class Session:
    """The layers of one command (``begin`` writes the journal).

    Args:
        layers: its layers.
        rules: what landing applies.
        store: the store folder (the journal's).
        action_id: the command.
        workspace: the folder the changes are named relative to.
    """

    def __init__(
        self,
        layers: tuple[Layer, ...],
        rules: Rules,
        *,
        store: str,
        action_id: str,
        workspace: str,
        limit: int = 1000,
    ) -> None:
        self.layers = layers
        self._watch = clock.Watch()  # before the time they begin: no set is missed
        self.rules = clock.kept(rules, (layer.folder for layer in layers))
        self.store = store
        self.action_id = action_id
        self.workspace = workspace
        self.limit = limit
        self._open = True
        self._write("running")

    def _write(self, state: journal.State) -> None:
        pid = os.getpid()
        durable = state != "running"  # a lost ``running`` entry leaves a layer nothing lands
        journal.write(
            self.store,
            journal.Entry(
                self.action_id,
                state=state,
                layers=self.layers,
                rules=self.rules,
                pid=pid,
                started=journal.start_time(pid),
            ),
            durable=durable,
        )

    def uppers(self) -> tuple[str, ...]:
        """The folders the command writes into."""
        return tuple(layer.upper for layer in self.layers)

    def growth(self) -> int:
        """The bytes landing would add to the roots: each upper file's blocks (an inode once)
        less those of the file it replaces, and each new folder's own blocks (a tree of
        empty folders takes room too).

        Walked by folder descriptors without recursion (:func:`~stockade.layers.place.walk`),
        so a tree of any depth is measured; an entry whose path in the root is too long to
        look up is counted whole (the quota errs on the side of refusing)."""
        total = 0
        seen: set[int] = set()
        for layer in self.layers:
            for visit in walk(layer.upper, own=True):
                for name in (*visit.folders, *visit.others):
                    info = os.stat(name, dir_fd=visit.fd, follow_symlinks=False)
                    folder = stat.S_ISDIR(info.st_mode)
                    if not folder and info.st_ino in seen:
                        continue
                    seen.add(info.st_ino)
                    below = None
                    if visit.rel is not None:  # (past PATH_MAX no path names what it replaces)
                        with contextlib.suppress(OSError):
                            below = os.lstat(os.path.join(layer.root, visit.rel, name))
                    if below is None:
                        total += info.st_blocks * 512
                    elif not folder:  # (a folder there stays: landing merges into it)
                        total += (info.st_blocks - below.st_blocks) * 512
        return total

    def end(self, *, keep: bool, room: int | None = None, wait: bool = False) -> Landing:
        """Land the layers (``keep``, and they fit in ``room`` more bytes when given), or
        list what they hold and discard them; ``wait``: list them and keep them for a
        person's answer (:mod:`stockade.layers.waiting`). Idempotent: a second call
        reports nothing."""
        if not self._open:
            return Landing("discarded", Changes(method="layer"))
        self._open = False
        kept = False
        self.rules, clocked = clock.settled(self.rules, self._watch)
        self._watch.close()
        try:
            if not keep:
                return self._discard("discarded")
            for layer in self.layers:  # the command may have taken its rights (chmod 300 .)
                own_folder(layer.upper)
            if room is not None and keep and self.growth() > room:
                return self._discard("over-quota")
            if not any(os.listdir(layer.upper) for layer in self.layers):
                return Landing("landed", Changes(method="layer"))  # it wrote nothing
            if wait:
                self.layers = aside(self.layers)
                self._write("waiting")
                kept = True
                return self._discard("waiting")
            self._write("landing")
            tally = Tally()
            for layer in self.layers:
                try:
                    land(layer, self.rules, tally)
                except Exception as error:  # noqa: BLE001 - said in the result, never lost
                    tally.fail(layer.root, error)
            if clocked and tally.conflicts:
                tally.failed.append(clocked)
            self._remember(tally)
            return Landing("landed", self._changes(tally), self._guarded(tally))
        finally:
            if not kept:
                discard(self.layers)
                journal.remove(self.store, self.action_id)

    def _discard(self, why: Kept) -> Landing:
        """What the layers would have changed (and withheld, and kept aside); nothing of
        it lands."""
        return Landing(why, self._changes(survey(self.layers, self.rules), landed=False))

    def _remember(self, tally: Tally) -> None:
        with _landed_lock:
            if len(_landed) > _REMEMBERED:
                _landed.clear()
            for path in (*tally.created, *tally.modified, *tally.deleted):
                _landed[path.rstrip("/")] = self.action_id

    def _guarded(self, tally: Tally) -> Guarded | None:
        if not (tally.quarantined or tally.failed or tally.conflicts):
            return None
        folder = self.rules.quarantine if tally.quarantined or tally.conflicts else None
        with _landed_lock:
            rivals = {_landed[p] for p in tally.conflicts if p in _landed}
        return Guarded(
            tuple(tally.quarantined),
            (),
            folder,
            tuple(tally.failed),
            conflicts=tuple(tally.conflicts),
            rivals=tuple(sorted(rivals)),
        )

    def _changes(self, tally: Tally, *, landed: bool = True) -> Changes:
        """The tally as paths relative to the workspace (absolute beyond it), capped; of
        layers that did not land, what landing would withhold and keep aside too."""
        lists, total, room = [], 0, self.limit
        for paths in (tally.created, tally.modified, tally.deleted):
            named = sorted(self._relative(p) for p in paths)
            total += len(named)
            kept = named[: max(room, 0)]
            room -= len(kept)
            lists.append(tuple(kept))
        return Changes(
            *lists,
            total=total,
            truncated=total > self.limit,
            method="layer",
            withheld=() if landed else tuple(tally.quarantined),
            conflicts=() if landed else tuple(tally.conflicts),
        )

    def _relative(self, path: str) -> str:
        base = self.workspace.rstrip("/") + "/"
        return path[len(base) :] if path.startswith(base) else path
