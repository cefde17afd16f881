"""The journal of a command's layers: a host killed mid-commit leaves nothing half-written.

One small file per command, ``<store>/layers/journal/<action_id>.json``, written (to a
temporary name, synced, renamed) before anything happens:

- ``running`` when its layers are made: the command may be writing into them;
- ``landing`` once the host decided that they land, before the first entry moves;
- ``waiting`` when the command ended and its layers wait for a person's answer
  (``commit = "ask"``, :mod:`stockade.layers.waiting`): no host's death touches them.

It is removed when the layers are gone. A host that starts (:func:`recover`) looks at every
journal whose host process is no longer alive (its pid and start time): a ``landing`` one is
landed to the end (each entry of a layer leaves it when it landed, so what is left is what
was not done: :mod:`stockade.layers.commit`), a ``running`` one is discarded (its command
died with its host; nothing of it reached the root), and each is reported, to be recorded.
One entry that cannot be finished, whatever it raises, is discarded and reported as failed:
it never stops the others, nor, left behind, every later command.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Literal

from attrs import field, frozen

from ..errors import SandboxUnavailable
from ..record.events import LayerEvent
from ..request import wire
from ..trees import remove_tree
from . import clock
from .commit import Rules, Tally, land
from .place import LAYERS, Layer, discard
from .rules import why
from .snapshots import remount

State = Literal["running", "landing", "waiting"]
JOURNAL = "journal"


@frozen
class Entry:
    """A command's layers as the journal keeps them.

    Attributes:
        action_id: the command.
        state: ``running`` (its writes may not land yet), ``landing`` (they land) or
            ``waiting`` (for a person's answer).
        layers: its layers.
        rules: what the commit applies.
        pid: the host process that made them.
        started: that process's start time (``/proc/PID/stat``), so a reused pid is told apart.
        version: the format version.
    """

    action_id: str
    state: State = field(kw_only=True)
    layers: tuple[Layer, ...] = field(kw_only=True)
    rules: Rules = field(kw_only=True)
    pid: int = field(kw_only=True)
    started: int = field(kw_only=True)
    version: int = field(kw_only=True, default=1)


@frozen
class Recovery:
    """What a starting host did with a commit its predecessor left.

    Attributes:
        action_id: the command whose layers they were.
        outcome: ``finished`` (the commit had begun: it was landed to the end) or
            ``discarded`` (the command had not ended: nothing of it landed).
        roots: the roots its layers covered.
        changed: paths created, modified or deleted by finishing it.
        quarantined: protected names moved to the quarantine while finishing it.
        failed: what could not be done, with why.
    """

    action_id: str
    outcome: Literal["finished", "discarded"] = field(kw_only=True)
    roots: tuple[str, ...] = field(kw_only=True)
    changed: tuple[str, ...] = field(kw_only=True, default=())
    quarantined: tuple[str, ...] = field(kw_only=True, default=())
    failed: tuple[str, ...] = field(kw_only=True, default=())


def folder(store: str) -> str:
    """The journal's folder in ``store``."""
    return os.path.join(store, LAYERS, JOURNAL)


def start_time(pid: int) -> int:
    """A process's start time in clock ticks since boot (``0``: no such process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            text = stat_file.read()
    except OSError:
        return 0
    return int(text.rsplit(b")", 1)[1].split()[19])


def write(store: str, entry: Entry, *, durable: bool = True) -> None:
    """Write ``entry`` atomically: the old state or the new one, never a mix; ``durable``:
    synced to disk too (a ``running`` entry need not be: lost at a power cut, it would only
    leave a layer nothing lands)."""
    where = folder(store)
    os.makedirs(where, mode=0o700, exist_ok=True)
    path = os.path.join(where, f"{entry.action_id}.json")
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, wire.to_json(entry).encode())
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    if durable:
        _sync(where)


def remove(store: str, action_id: str) -> None:
    """The command's layers are gone: forget them."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(folder(store), f"{action_id}.json"))


def _sync(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _alive(entry: Entry) -> bool:
    return entry.pid == os.getpid() or (
        entry.started != 0 and start_time(entry.pid) == entry.started
    )


STRAY_AGE = 3600.0
"""Seconds after which a layer folder that no journal names is removed: its host died
between making it and writing the journal (a live host writes it at once)."""


def recover(store: str) -> list[Recovery]:
    """Finish or discard every commit a dead host left in ``store`` (see the module), and
    remove stray layer folders (:data:`STRAY_AGE`)."""
    where = folder(store)
    try:
        names = sorted(os.listdir(where))
    except OSError:
        names = []
    done = _recover(where, names, store)
    _sweep(os.path.dirname(where), {n.removesuffix(".json") for n in names})
    return done


def _sweep(layers: str, named: set[str]) -> None:
    try:
        entries = list(os.scandir(layers))
    except OSError:
        return
    now = time.time()
    for entry in entries:
        action_id = entry.name.rsplit(".", 1)[0]
        if entry.name == JOURNAL or action_id in named or not entry.is_dir(follow_symlinks=False):
            continue
        with contextlib.suppress(OSError):
            if now - entry.stat(follow_symlinks=False).st_mtime > STRAY_AGE:
                remove_tree(entry.path)


def _recover(where: str, names: list[str], store: str) -> list[Recovery]:
    done: list[Recovery] = []
    for name in names:
        path = os.path.join(where, name)
        if not name.endswith(".json"):
            continue
        entry = _read(path)
        if entry is None or entry.state == "waiting" or _alive(entry):
            continue  # a waiting one is a person's to answer (stockade land)
        done.append(_settle(entry, store))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return done


def _read(path: str) -> Entry | None:
    """The entry in journal file ``path``; ``None``: another format, or a file being
    written, not ours to judge (whatever reading it raises: one odd file must not stop
    every later command)."""
    try:
        with open(path, "rb") as journal:
            return wire.from_json(journal.read(), Entry)
    except Exception:  # noqa: BLE001 - OSError, bad JSON, a malformed Entry, nesting too deep
        return None


def _settle(entry: Entry, store: str) -> Recovery:
    """Finish (``landing``) or discard (``running``) what a dead host left of ``entry``.
    Whatever that raises, its layers are discarded and the failure is reported
    (:func:`_abandon`): an entry that cannot be finished never stops the others, nor, left
    in the journal, every later command."""
    try:
        return _finish(entry, store) if entry.state == "landing" else _drop(entry)
    except Exception as error:  # noqa: BLE001 - any failure of one entry is reported, not raised
        return _abandon(entry, error)


def _abandon(entry: Entry, error: Exception) -> Recovery:
    """``entry`` whose finishing failed: its layers discarded (what remains of them, the
    sweep takes: :data:`STRAY_AGE`), nothing more of it lands, and ``failed`` says why."""
    with contextlib.suppress(Exception):  # (a folder left is swept once old)
        discard(entry.layers)
    return Recovery(
        entry.action_id,
        outcome="discarded",
        roots=tuple(layer.root for layer in entry.layers),
        failed=(f"{entry.action_id}: {why(error)}; not finished, its layers discarded",),
    )


_RECOVERED: set[str] = set()
_RECOVERING = threading.Lock()


def recover_once(store: str, record: Callable[[LayerEvent], None]) -> None:
    """:func:`recover_recorded` for ``store``, the first time this process asks for it."""
    with _RECOVERING:
        if store in _RECOVERED:
            return
        _RECOVERED.add(store)
        recover_recorded(store, record)


def recover_recorded(store: str, record: Callable[[LayerEvent], None]) -> list[LayerEvent]:
    """:func:`recover`, each commit finished or discarded given to ``record`` as an event."""
    found = [
        LayerEvent(
            r.action_id,
            outcome=r.outcome,
            roots=r.roots,
            changed=r.changed,
            quarantined=r.quarantined,
            failed=r.failed,
        )
        for r in recover(store)
    ]
    for event in found:
        record(event)
    return found


def _finish(entry: Entry, store: str) -> Recovery:
    tally = Tally()
    rules, clocked = clock.settled(entry.rules)  # set since, or another boot: kept aside
    for layer in entry.layers:
        try:
            remount(layer.root, store=store)  # a fork a reboot unmounted: never its bare folder
            land(layer, rules, tally)
        except (OSError, SandboxUnavailable) as error:
            tally.failed.append(f"{layer.root}: {why(error)}")
        except Exception as error:  # noqa: BLE001 - a landing that raises (RecursionError...)
            tally.fail(layer.root, error)
    discard(entry.layers)
    if clocked and tally.conflicts:
        tally.failed.append(clocked)
    return Recovery(
        entry.action_id,
        outcome="finished",
        roots=tuple(layer.root for layer in entry.layers),
        changed=(*tally.created, *tally.modified, *tally.deleted),
        quarantined=tuple(tally.quarantined),
        failed=(*tally.failed, *(f"{p}: changed since; kept aside" for p in tally.conflicts)),
    )


def _drop(entry: Entry) -> Recovery:
    discard(entry.layers)
    return Recovery(
        entry.action_id, outcome="discarded", roots=tuple(layer.root for layer in entry.layers)
    )
