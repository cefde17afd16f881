"""The process starts that are not a command's plan, in one place.

Every command an agent asks for is started by the executor (``stockade-local``) from a
:class:`~stockade.request.plan.LaunchPlan`: confined, observed and recorded. Six other
starts exist, and none of them can go through a plan:

- :func:`probe` runs a sandbox backend's own binary (``bwrap --version``, a trial sandbox)
  to decide whether a plan can exist at all: it happens before any plan, while the provider
  is being chosen, so there is no plan or executor to start it with.
- :func:`fork_exec` starts the command *inside* a sandbox, from the egress forwarder that the
  executor started there: no executor is in the sandbox, and the command is the plan's own.
- :func:`become` replaces the seccomp launcher (:mod:`stockade.confine.seccomp_exec`) by the
  command, inside a sandbox, once the filter is loaded: the same process, the plan's own
  command.
- :func:`open_browser` opens the UI's page for the person at the desk, not for an agent:
  nothing to confine, approve or record.
- :func:`start_detached` starts the warm server (``stockade serve``) for the command line's
  thin client: Stockade itself, not a command; the commands it runs go through plans.
- :func:`start_piped` starts the sharded record's writers
  (:mod:`stockade.record.writers`): Stockade itself, writing its own record; no command.

This module uses the standard library only and imports nothing of Stockade: the bubblewrap
provider carries its source into the sandbox, where it runs under ``python -I -S`` ahead of
the forwarder's. For the same reason it imports nothing that the forwarder would not load
anyway (``typing``, ``dataclasses``): each would add to every network command's start.
``subprocess`` and ``webbrowser`` are imported inside the functions that need them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

MYPY = False
"""True for the type checker alone (this module imports no ``typing``: above)."""
if MYPY:
    import subprocess


class Probed:
    """What a probe's process did.

    A plain class, not attrs: this module runs in the sandbox without site-packages.

    Attributes:
        returncode: its exit status (negative: the signal that ended it).
        stdout: all it wrote to standard output.
        stderr: all it wrote to standard error.
    """

    __slots__ = ("returncode", "stderr", "stdout")

    def __init__(self, returncode: int, stdout: bytes, stderr: bytes) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr

    def __repr__(self) -> str:
        return f"Probed({self.returncode}, {self.stdout!r}, {self.stderr!r})"


def probe(argv: Sequence[str], *, timeout: float) -> Probed:
    """Run ``argv`` (no shell) to completion, its output captured; what it did.

    Raises:
        TimeoutError: it had not ended after ``timeout`` seconds (it is killed).
        OSError: it could not be started (no such file, not executable, ...).
    """
    import subprocess

    try:
        done = subprocess.run(list(argv), capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"{argv[0]}: no answer in {timeout:g} s") from None
    return Probed(done.returncode, done.stdout, done.stderr)


def fork_exec(program: str, argv: Sequence[str]) -> int:
    """Start ``program`` with ``argv`` (``argv[0]`` included) in a child; the child's pid.

    The child inherits only the descriptors marked inheritable: mark the caller's own
    non-inheritable before calling. Should ``program`` not start, the child says why on
    standard error and exits with status 127, as a shell does.
    """
    pid = os.fork()
    if pid == 0:
        try:
            os.execv(program, list(argv))  # noqa: S606 - argv, no shell: the point
        except BaseException as error:  # noqa: BLE001 - the child must never return
            why = getattr(error, "strerror", None) or str(error)
            os.write(2, f"stockade: cannot run {program}: {why}\n".encode())
        finally:
            os._exit(127)
    return pid


def become(program: str, argv: Sequence[str]) -> None:
    """Replace this process by ``program`` with ``argv`` (``argv[0]`` included).

    Returns only if it could not: then it says why on standard error and exits with
    status 127, as a shell does.
    """
    try:
        os.execv(program, list(argv))  # noqa: S606 - argv, no shell: the point
    except OSError as error:
        os.write(2, f"stockade: cannot run {program}: {error.strerror}\n".encode())
    os._exit(127)


def open_browser(url: str) -> bool:
    """Open ``url`` in the desktop's browser; whether one took it."""
    import webbrowser

    try:
        return webbrowser.open(url)
    except webbrowser.Error:
        return False


def start_detached(argv: Sequence[str], *, log: str, env: dict[str, str]) -> int:
    """Start ``argv`` in a session of its own, detached from this process's terminal, its
    output appended to ``log`` (0600); its pid. This process does not wait for it."""
    import subprocess

    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        child = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            env=env,
            cwd="/",
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(fd)
    return child.pid


class Piped:
    """A child started by :func:`start_piped`: its pipes and its end.

    Attributes:
        pid: its process id.
        stdin: the write end of its standard input (a raw descriptor).
        stdout: its standard output, to read (a buffered file).
    """

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdin is not None and process.stdout is not None  # noqa: S101
        self._process = process
        self.pid = process.pid
        self.stdin = process.stdin.fileno()
        self.stdout = process.stdout
        self._input = process.stdin

    def poll(self) -> int | None:
        """Its exit status, or ``None`` while it runs."""
        return self._process.poll()

    def wait(self, timeout: float) -> int | None:
        """Its exit status once it ended, waiting at most ``timeout`` seconds (``None``:
        it still runs)."""
        import subprocess

        try:
            return self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """``SIGKILL`` it (nothing when it has ended)."""
        if self._process.poll() is None:
            self._process.kill()

    def close_input(self) -> None:
        """Close its standard input's write end (it reads the end of its input)."""
        if not self._input.closed:
            os.set_blocking(self.stdin, True)
            self._input.close()


def start_piped(argv: Sequence[str], *, env: dict[str, str]) -> Piped:
    """Start ``argv`` in a session of its own (a person's ^C stops this process, which ends
    it), its standard input and output pipes of this process's, its standard error this
    process's.

    Raises:
        OSError: it could not be started.
    """
    import subprocess

    return Piped(
        subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    )
