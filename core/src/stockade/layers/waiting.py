"""Layers that wait for a person (``commit = "ask"``): listed, landed or refused.

A command whose profile says ``commit = "ask"`` ends with its layers kept and its journal
saying ``waiting`` (:mod:`stockade.layers.session`); nothing of it is in the real folder.
The host asks a person at once when one can answer (:mod:`stockade.policy.landing`);
otherwise the layers wait, across host restarts, until ``stockade land ACTION`` (or
``--refuse``). Answers are taken under one lock, so two answers never both act: the
second finds nothing waiting. Landing goes through the journal's ``landing``
state like any other, so a process killed while it lands has it finished by the next host.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator

from .. import owned
from ..errors import UsageError
from ..record.events import LayerEvent
from ..request import wire
from ..request.result import Changes
from . import clock, journal
from .commit import Tally, land
from .place import discard
from .survey import survey

ANSWERS = "answers.lock"
_ACTION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def entries(store: str) -> list[journal.Entry]:
    """The layers waiting for an answer in ``store``, oldest first."""
    where = journal.folder(store)
    try:
        names = [n for n in os.listdir(where) if n.endswith(".json")]
    except OSError:
        return []
    found = []
    for name in names:
        entry = _read(os.path.join(where, name))
        if entry is not None and entry.state == "waiting":
            found.append((os.stat(os.path.join(where, name)).st_mtime, entry))
    return [entry for _, entry in sorted(found, key=lambda pair: pair[0])]


def preview(entry: journal.Entry) -> Changes:
    """What landing ``entry``'s layers would do now (:func:`~stockade.layers.survey.survey`),
    by absolute path."""
    tally = survey(entry.layers, clock.settled(entry.rules)[0])
    return Changes(
        tuple(tally.created),
        tuple(tally.modified),
        tuple(tally.deleted),
        total=len(tally.created) + len(tally.modified) + len(tally.deleted),
        method="layer",
        withheld=tuple(tally.quarantined),
        conflicts=tuple(tally.conflicts),
    )


def settle(
    store: str, action_id: str, *, land_it: bool, by: str, reason: str = ""
) -> tuple[LayerEvent, Tally]:
    """Land (``land_it``) or discard the layers of ``action_id`` that wait for an answer;
    the event to record and what landing did.

    Raises:
        UsageError: nothing of that command waits (never did, or already answered).
    """
    if not _ACTION_ID.fullmatch(action_id):
        raise UsageError(
            f"{action_id!r} is not a command's action id",
            hint="`stockade land` lists the ones whose writes wait",
        )
    with _claimed(store):
        entry = _read(os.path.join(journal.folder(store), f"{action_id}.json"))
        if entry is None or entry.state != "waiting":
            raise UsageError(
                f"no landing waits for command {action_id}",
                hint="`stockade land` lists the ones that do; an answer is taken once",
            )
        roots = tuple(layer.root for layer in entry.layers)
        tally = Tally()
        if land_it:
            pid = os.getpid()
            journal.write(
                store,
                journal.Entry(
                    action_id,
                    state="landing",
                    layers=entry.layers,
                    rules=entry.rules,
                    pid=pid,
                    started=journal.start_time(pid),
                ),
            )
            rules, clocked = clock.settled(entry.rules)  # set while it waited: kept aside
            for layer in entry.layers:
                try:
                    land(layer, rules, tally)
                except Exception as error:  # noqa: BLE001 - said in the result, never lost
                    tally.fail(layer.root, error)
            if clocked and tally.conflicts:
                tally.failed.append(clocked)
        discard(entry.layers)
        journal.remove(store, action_id)
    event = LayerEvent(
        action_id,
        outcome="landed" if land_it else "refused",
        roots=roots,
        changed=(*tally.created, *tally.modified, *tally.deleted),
        quarantined=tuple(tally.quarantined),
        failed=(*tally.failed, *(f"{p}: changed since; kept aside" for p in tally.conflicts)),
        by=by,
        reason=reason,
    )
    return event, tally


def _read(path: str) -> journal.Entry | None:
    try:
        with open(path, "rb") as journal_file:
            return wire.from_json(journal_file.read(), journal.Entry)
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _claimed(store: str) -> Iterator[None]:
    """The lock on answering (one file beside the journals, never removed, so two
    processes always lock the same one): answers are taken one at a time."""
    where = journal.folder(store)
    os.makedirs(where, mode=0o700, exist_ok=True)
    with owned.locked(os.path.join(where, ANSWERS)):
        yield
