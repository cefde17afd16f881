"""Which process is carrying out an allowed command, so that a killed one's are closed later.

A command is *started* when a permission event allows it; its record is *closed* by its
result, an error, a decline, or a later decision that holds or denies it. Between the two,
the store's ``live`` table names the process that recorded the permission (the one whose
recorder will record the result): the boot, its pid namespace, its pid and its start time,
so that a reused pid is never taken for it. When that process is gone (a warm server killed
with SIGKILL, say) nobody will record the result; the next recorder that opens the store
closes each such command with an ``error`` event of code ``aborted`` that says why
(:func:`orphans`, called by :class:`~stockade.record.recorder.Recorder`).

A row written on another boot or from another pid namespace (a container sharing the
store) is left alone when its process cannot be seen from here, except that a row of an
earlier boot is closed: no process survives a reboot.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite3

    from .events import Event

ABORTED = "aborted"
"""The code of the error event that closes a command whose process went away."""

_owner: dict[int, str] = {}


def owner() -> str:
    """This process, as the ``live`` table names it: ``boot pidns pid starttime``."""
    pid = os.getpid()
    found = _owner.get(pid)
    if found is None:
        found = f"{_boot()} {_pidns('self')} {pid} {_start('self')}"
        _owner.clear()  # a forked child is another process
        _owner[pid] = found
    return found


def track(db: sqlite3.Connection, event: Event, carrier: str | None = None) -> None:
    """Keep the ``live`` table in step with ``event`` (inside the caller's transaction);
    ``carrier``: the process that will record the command's end, as :func:`owner` names
    it (by default this one; a shard writer names its driver)."""
    if event.kind == "permission":
        if event.decision.verdict == "allow":
            who = carrier or owner()
            db.execute("INSERT OR REPLACE INTO live VALUES (?, ?)", (event.action_id, who))
            return
    elif event.kind not in ("result", "error", "decline"):
        return
    db.execute("DELETE FROM live WHERE action_id=?", (event.action_id,))


def orphans(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """The started commands whose process is gone: ``(action_id, why)`` for each."""
    rows = db.execute("SELECT action_id, owner FROM live").fetchall()
    found = []
    for action_id, who in rows:
        why = _gone(str(who))
        if why:
            found.append((str(action_id), why))
    return found


def _gone(who: str) -> str | None:
    """Why the process ``who`` names can no longer record a result, or ``None``."""
    try:
        boot, pidns, pid, start = who.split(" ")
    except ValueError:
        return None
    if boot != _boot():
        return f"the machine restarted while process {pid} was carrying it out"
    if pidns != _pidns("self"):
        return None  # another pid namespace's process: not ours to judge
    if _start(pid) == start and _state(pid) not in ("Z", "X", None):
        return None
    return (
        f"the process carrying it out (pid {pid}) ended before its result was recorded "
        "(killed, or it crashed)"
    )


@functools.cache
def boot_id() -> str:
    """This boot's identity (``""``: it cannot be read); the same for the machine's whole
    uptime, so read once per process."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def _boot() -> str:
    return boot_id() or "unknown"


def _pidns(pid: str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return "unknown"


def _fields(pid: str) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def _start(pid: str) -> str:
    fields = _fields(pid)
    return fields[19].decode() if fields and len(fields) > 19 else "gone"


def _state(pid: str) -> str | None:
    fields = _fields(pid)
    return fields[0].decode() if fields else None
