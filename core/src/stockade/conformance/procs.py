"""Looking at real processes through /proc, without touching them unless asked."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

ZOMBIE = "Z"


def state(pid: int) -> str | None:
    """The one-letter state of ``pid`` (``R``, ``S``, ``Z``...), or ``None`` when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # the command name is in parentheses and may hold spaces: the state follows the last ')'
    return stat.rsplit(")", 1)[1].split()[0]


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (it can still run code)."""
    current = state(pid)
    return current is not None and current != ZOMBIE


def gone(pid: int) -> bool:
    """Whether ``pid`` has no /proc entry at all (dead and reaped)."""
    return state(pid) is None


def reap_if_ours(pid: int) -> None:
    """Reap ``pid`` if it is a zombie child of this process (host death re-parents to us)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def wait_until(predicate: object, timeout: float = 30.0, interval: float = 0.01) -> bool:
    """Poll ``predicate()`` until it is true or ``timeout`` seconds passed; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():  # type: ignore[operator]
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def wait_dead(pid: int, timeout: float = 30.0) -> bool:
    """Poll until ``pid`` cannot run any more (gone, or a zombie we then reap)."""

    def dead() -> bool:
        reap_if_ours(pid)
        return not alive(pid)

    return wait_until(dead, timeout)


def read_pid(path: Path, timeout: float = 30.0) -> int:
    """The PID a command wrote to ``path`` (waits for the file to be complete)."""

    def ready() -> bool:
        try:
            return path.read_text().endswith("\n")
        except FileNotFoundError:
            return False

    if not wait_until(ready, timeout):
        raise AssertionError(f"no pid was written to {path} within {timeout} s")
    return int(path.read_text())


def kill_quietly(pid: int) -> None:
    """SIGKILL ``pid`` if it still exists (test cleanup of a known escapee)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, 9)
    reap_if_ours(pid)


def sleeping(marker: str) -> list[int]:
    """The PIDs of every ``sleep MARKER`` process (the marker is an unusual duration)."""
    needle = f"sleep\0{marker}".encode()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if needle in f.read():
                        found.append(int(name))
            except OSError:
                pass
    return found


def open_fds() -> set[tuple[str, str]]:
    """This process's open descriptors, each as (number, what it points at).

    Compare two of these by difference, not by count: another thread may close one of its
    own meanwhile, and a leak is what stays open that was not open before.
    """
    fds = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed already
            fds.add((fd, os.readlink(f"/proc/self/fd/{fd}")))
    return fds
