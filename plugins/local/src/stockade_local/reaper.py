"""Find and kill what a command left behind, including descendants that left its group.

The executor makes the host a *child subreaper* (``PR_SET_CHILD_SUBREAPER``): a descendant
whose parent dies (a double fork, a ``setsid`` daemon) is re-parented to the host instead of
init, so it stays in reach. Each run marks its environment with ``STOCKADE_RUN_ID``; after the
command ends, the host's own children that carry the mark of a finished run are killed and
reaped, and so are their children once they in turn are re-parented. Children without a mark
are the embedding program's own and are left alone. A descendant that also wipes its
environment escapes this attribution; only a PID namespace (the bubblewrap provider) closes
that hole.

``prctl`` has no Python binding in the standard library, hence the one ctypes call.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Collection

MARKER = "STOCKADE_RUN_ID"
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_MAX_ROUNDS = 64

_subreaper_lock = threading.Lock()
_subreaper_pid: int | None = None

# Runs are per process, like the subreaper: every host in this process registers here, so one
# host's sweep never mistakes another host's live run for a leftover.
_live_lock = threading.Lock()
_live_runs: set[str] = set()


def start_run(run_id: str) -> None:
    """Register a run before its process is spawned."""
    with _live_lock:
        _live_runs.add(run_id)


def end_run(run_id: str) -> None:
    """Forget a run after its final sweep."""
    with _live_lock:
        _live_runs.discard(run_id)


def is_live(run_id: str) -> bool:
    """Whether ``run_id`` is still running in this process."""
    with _live_lock:
        return run_id in _live_runs


def ensure_subreaper() -> bool:
    """Make this process a child subreaper (once per process); whether it worked."""
    global _subreaper_pid  # noqa: PLW0603 - a per-process fact, reset after fork
    pid = os.getpid()
    if _subreaper_pid == pid:
        return True
    with _subreaper_lock:
        if _subreaper_pid == pid:
            return True
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            return False
        _subreaper_pid = pid
        return True


def is_subreaper() -> bool:
    """Whether this process is a child subreaper."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    flag = ctypes.c_int(0)
    libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)
    return bool(flag.value)


def own_children() -> list[int]:
    """The PIDs whose parent is this process (every thread's children)."""
    return _children("self")


def descendants(pid: int) -> list[int]:
    """The PIDs below ``pid`` (``pid`` itself left out), parents before their children.

    The tree is walked through ``/proc/<pid>/task/*/children``, one level at a time. A
    process that ends during the walk is left out, and so are its children; one started
    during the walk may be missed.
    """
    found: list[int] = []
    seen = {pid}
    parents = [pid]
    while parents:
        level = [child for parent in parents for child in _children(parent) if child not in seen]
        seen.update(level)
        found.extend(level)
        parents = level
    return found


def _children(pid: int | str) -> list[int]:
    """The PIDs whose parent is ``pid`` (every thread's children); empty if it is gone."""
    pids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return pids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                pids.extend(int(p) for p in f.read().split())
        except OSError:
            continue
    return pids


def run_mark(pid: int) -> str | None:
    """The ``STOCKADE_RUN_ID`` in a process's environment, or ``None``."""
    needle = MARKER.encode() + b"="
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(needle):
            return entry[len(needle) :].decode("ascii", "replace")
    return None


def _zombie_group(pid: int) -> int | None:
    """The process group of ``pid`` if it is a zombie, else ``None``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields start after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) < 3 or fields[0] != b"Z":
        return None
    return int(fields[2])


def _nested(pid: int) -> bool:
    """Whether the child ``pid`` lives in a pid namespace below this process's.

    Such a child was never forked by this process (``fork`` keeps a child in its parent's
    namespace): it is an orphan the kernel handed to this subreaper, such as the init that
    bubblewrap's outer process leaves behind when it exits first. It has a session of its
    own, so the run's process group does not find it, and its environment (the mark) is
    unreadable from outside its user namespace. Nobody here will ever wait for it, and the
    run it came from has ended (its outer process, which held it, is gone).
    """
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read()
    except OSError:
        return False
    return _levels(status) > _own_levels()


def _levels(status: bytes) -> int:
    """How many pid namespaces a ``/proc/PID/status`` says its process is seen in."""
    for line in status.splitlines():
        if line.startswith(b"NSpid:"):
            return len(line.split()) - 1
    return 1


_own: list[int] = []


def _own_levels() -> int:
    if not _own:
        with open("/proc/self/status", "rb") as f:
            _own.append(_levels(f.read()))
    return _own[0]


def reap_adopted() -> int:
    """Reap every zombie child of this process that it never forked itself (see
    :func:`_nested`); how many. Safe to call at any time from any thread: no code
    of this process waits for such a child."""
    reaped = 0
    for pid in own_children():
        if _zombie_group(pid) is not None and _nested(pid):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
                reaped += 1
    return reaped


def sweep(run_id: str, pgid: int, exclude: Collection[int]) -> int:
    """Kill and reap everything left of run ``run_id``; the number of processes killed.

    A marked child is killed when its mark is this run's, or a run no longer live. Liveness
    is asked after the mark is read: a run registers before it spawns, so a process whose
    mark was readable belongs to a run already registered. The mark this process inherited
    itself (a host running inside a Stockade run) marks its own children, never leftovers.

    A zombie has no readable environment, so no mark: a zombie child is reaped when it is in
    the run's process group (the group's ID cannot be reused while a zombie still holds it,
    so it cannot be the embedding program's child), or when it lives in a pid namespace below
    this process's (an adopted orphan: :func:`_nested`), which is killed first if it lives.

    Args:
        run_id: the finished run.
        pgid: its process group (the leader's PID).
        exclude: PIDs never to touch (helper processes).
    """
    inherited = os.environ.get(MARKER)
    killed = 0
    for _ in range(_MAX_ROUNDS):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        targets = []
        living = False  # a live target's children are re-parented to us when it dies
        for pid in own_children():
            if pid in exclude:
                continue
            mark = run_mark(pid)
            if mark is None:
                zombie = _zombie_group(pid)
                if zombie == pgid or _nested(pid):
                    targets.append(pid)
                    living = living or zombie is None
                continue
            if mark == inherited and mark != run_id:
                continue
            if mark == run_id or not is_live(mark):
                targets.append(pid)
                living = True
        if not targets:
            return killed
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in targets:
            # Reaping it also guarantees its own children were re-parented to us already.
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        killed += len(targets)
        if not living:
            # Only zombies: their children were re-parented to us before they died, so
            # this round saw them already. Nothing new can have arrived.
            return killed
    return killed
