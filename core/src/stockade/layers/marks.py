"""The breaker's private-file marks carried from a workspace into its snapshots and forks.

The breaker keeps the files a run wrote while it held private data in a sidecar of the
record (:class:`stockade.record.taint.PrivateFiles`), keyed by the workspace's real path.
A fork is another path: without its marks, a command in a fork would read a private-derived
file the source refused, untainted. So :func:`keep` copies the source's marks when a
snapshot is taken (``<store>/snapshots/ID.private``, beside the snapshot, masked from every
sandbox like it), and :func:`give` marks them, with the run and step that made them, for
each fork made of it. A mark a fork gets stays the fork's: it goes when a watched command
there deletes the file, as in any workspace, and every one goes with the fork
(:func:`drop`): a fork made again at its path starts with the snapshot's marks alone.

The record is ``store.db`` in the store's folder unless told (``record``, for a store whose
``store.path`` names another file); with no record there, there are no marks to carry.
"""

from __future__ import annotations

import json
import os

from ..record.store import Store
from ..record.taint import PrivateFiles

RECORD = "store.db"
"""The record's file in the store's folder, unless ``store.path`` names another."""


def _record(store: str, record: str | None) -> str | None:
    path = record or os.path.join(store, RECORD)
    return path if os.path.isfile(path) else None


def keep(source: str, note: str, *, store: str, record: str | None = None) -> int:
    """Write the marks of workspace ``source`` (resolved) to ``note``; how many."""
    path = _record(store, record)
    if path is None:
        return 0
    opened = Store(path)
    try:
        rows = PrivateFiles(opened).rows(source)
    finally:
        opened.close()
    if rows:
        fd = os.open(note, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with open(fd, "w") as out:
            json.dump([list(row) for row in rows], out)
    return len(rows)


def give(note: str, fork: str, *, store: str, record: str | None = None) -> int:
    """Mark for workspace ``fork`` (resolved) the files ``note`` keeps; how many."""
    try:
        with open(note) as kept:
            rows = [(str(p), str(r), int(s)) for p, r, s in json.load(kept)]
    except FileNotFoundError:
        return 0
    path = _record(store, record)
    if path is None or not rows:
        return 0
    opened = Store(path)
    try:
        files = PrivateFiles(opened)
        for run_id, step in sorted({(r, s) for _, r, s in rows}):
            chosen = [p for p, r, s in rows if (r, s) == (run_id, step)]
            files.mark(fork, chosen, run_id=run_id, step=step)
    finally:
        opened.close()
    return len(rows)


def drop(fork: str, *, store: str, record: str | None = None) -> None:
    """Forget every mark of workspace ``fork`` (resolved): it was discarded, or is made
    again at its path from its snapshot."""
    path = _record(store, record)
    if path is None:
        return
    opened = Store(path)
    try:
        PrivateFiles(opened).drop(fork)
    finally:
        opened.close()
