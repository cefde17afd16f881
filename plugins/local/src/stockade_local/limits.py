"""Resource limits for a command and what it starts, and no core dumps, ever.

Limits are rlimits, set by util-linux's ``prlimit`` as a launcher: the executor runs
``prlimit --as=... --nproc=... --fsize=... --cpu=... -- PROGRAM ARGS``, which sets its own
limits (soft and hard alike, so the command cannot raise them) and then executes the
program. Setting them from Python between fork and exec would mean running Python in the
forked child of a multi-threaded host, and setting them on the host around the spawn would
bind the host's other threads too. The launcher costs one more exec (about 1 ms), paid only
by a command that has limits.

What the kernel does with them:

- ``memory_mb``: ``RLIMIT_AS``, the address space of each process. An allocation past it
  fails (``MemoryError``, ``ENOMEM``); nothing is killed.
- ``processes``: ``RLIMIT_NPROC``. The kernel counts every process of the user, not only the
  command's (inside a bubblewrap sandbox too: the user's processes outside count), and never
  limits root (uid 0), not even without capabilities; for root, see below.
- ``file_size_mb``: ``RLIMIT_FSIZE``: a longer write gets ``SIGXFSZ``.
- ``cpu_seconds``: ``RLIMIT_CPU`` per process: ``SIGKILL`` when it is used up.

Root and processes: since the kernel ignores ``RLIMIT_NPROC`` for uid 0, a root host puts a
command with a process limit into a pids cgroup of its own (``pids.max``), where the cgroup
v1 pids hierarchy is writable (``/sys/fs/cgroup/pids``). The spawning thread joins the
cgroup, spawns, and ends: cgroup v1 places threads one by one, so the host's other threads
stay where they are, and the command is born inside, with no window before it is counted.
(Under cgroup v2 a thread cannot leave its process's cgroup; there the limit is reported as
not enforced.)

Core dumps: the first spawn sets the host's own ``RLIMIT_CORE`` to 0, soft and hard, and
every command inherits it. A core dump of the host would hold the credentials it handed
out; one of a command could land anywhere ``core_pattern`` says.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import stat
import threading
import time

from stockade.request.literals import LimitName
from stockade.request.result import ProcessOutcome
from stockade.request.spec import Limits

PRLIMIT_PATHS = ("/usr/bin/prlimit", "/bin/prlimit")
_MIB = 1 << 20
_MEMORY = ("MemoryError", "Cannot allocate memory", "out of memory", "bad_alloc")
_PROCESSES = ("Resource temporarily unavailable", "fork: retry", "Cannot fork", "can't fork")
_lock = threading.Lock()
_cores_off_in: int | None = None


def prlimit() -> str | None:
    """The system's ``prlimit``, if root owns it and only root can change it."""
    for path in PRLIMIT_PATHS:
        try:
            info = os.stat(path)
            where = os.stat(os.path.dirname(path))
        except OSError:
            continue
        writable_by_others = (info.st_mode | where.st_mode) & (stat.S_IWGRP | stat.S_IWOTH)
        if info.st_uid == 0 and where.st_uid == 0 and not writable_by_others:
            return path
    return None


def root_exempt() -> bool:
    """Whether the kernel ignores ``RLIMIT_NPROC`` here: the host runs as root."""
    return os.getuid() == 0


PIDS_V1 = "/sys/fs/cgroup/pids"


def pids_hierarchy() -> str | None:
    """The writable cgroup v1 pids hierarchy, if there is one."""
    if os.path.isfile(os.path.join(PIDS_V1, "tasks")) and os.access(PIDS_V1, os.W_OK):
        return PIDS_V1
    return None


def processes_enforced_by() -> str | None:
    """How a process limit is enforced here: ``rlimit``, ``cgroup``, or ``None``."""
    if not root_exempt():
        return "rlimit"
    return "cgroup" if pids_hierarchy() is not None else None


class PidsCgroup:
    """A pids cgroup (v1) of one run: ``pids.max``, joined by the spawning thread."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def make(cls, run_id: str, processes: int) -> PidsCgroup | None:
        """A new cgroup under ``stockade/`` allowing ``processes``; ``None`` if impossible."""
        root = pids_hierarchy()
        if root is None:
            return None
        path = os.path.join(root, "stockade", run_id)
        try:
            os.makedirs(path, mode=0o755)
            with open(os.path.join(path, "pids.max"), "w", encoding="ascii") as f:
                f.write(str(processes))
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(path)
            return None
        return cls(path)

    def join(self) -> None:
        """Move the calling thread (only it) into the cgroup."""
        with open(os.path.join(self.path, "tasks"), "w", encoding="ascii") as f:
            f.write(str(threading.get_native_id()))

    def hit(self) -> bool:
        """Whether a fork was refused because the cgroup was full."""
        try:
            with open(os.path.join(self.path, "pids.events"), encoding="ascii") as f:
                counts = dict(line.split(maxsplit=1) for line in f if line.strip())
            return int(counts.get("max", "0")) > 0
        except (OSError, ValueError):
            return False

    def remove(self) -> None:
        """Remove the cgroup once the run's processes are gone (retried briefly)."""
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)  # the last members are still being reaped


def no_core_dumps() -> None:
    """Set this process's ``RLIMIT_CORE`` to 0 (soft and hard), once per process."""
    global _cores_off_in  # noqa: PLW0603 - a per-process fact, reset after fork
    pid = os.getpid()
    if _cores_off_in == pid:
        return
    with _lock:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        _cores_off_in = pid


def launcher_args(launcher: str, limits: Limits) -> list[str]:
    """``prlimit`` and its options for ``limits``, up to and including ``--``."""
    args = [launcher]
    if limits.memory_mb is not None:
        args.append(f"--as={limits.memory_mb * _MIB}")
    if limits.processes is not None:
        args.append(f"--nproc={limits.processes}")
    if limits.file_size_mb is not None:
        args.append(f"--fsize={limits.file_size_mb * _MIB}")
    if limits.cpu_seconds is not None:
        args.append(f"--cpu={limits.cpu_seconds}")
    return [*args, "--"]


def limit_hit(limits: Limits, outcome: ProcessOutcome) -> LimitName | None:
    """The limit that most likely ended the run: from the signal, else from stderr."""
    if not limits.any() or outcome.exit_code == 0 or outcome.timed_out or outcome.aborted:
        return None
    died = _signal_of(outcome)
    too_large = died == signal.SIGXFSZ or _says(outcome, "File too large")
    if limits.file_size_mb is not None and too_large:
        return "file_size"
    if limits.cpu_seconds is not None and died in (signal.SIGXCPU, signal.SIGKILL):
        return "cpu"
    if limits.memory_mb is not None and any(_says(outcome, s) for s in _MEMORY):
        return "memory"
    if limits.processes is not None and any(_says(outcome, s) for s in _PROCESSES):
        return "processes"
    return None


def _signal_of(outcome: ProcessOutcome) -> int | None:
    if outcome.signal is not None:
        return int(signal.Signals[outcome.signal])
    code = outcome.exit_code
    # A sandbox runner (bwrap's init) reports its command's death as 128+N.
    return code - 128 if code is not None and 128 < code <= 128 + 64 else None


def _says(outcome: ProcessOutcome, text: str) -> bool:
    return text in outcome.stderr.text
