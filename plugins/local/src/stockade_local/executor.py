"""The local executor: runs a launch plan as a bounded, captured, fully reaped process tree.

One run, in order: mark the environment, spawn the program in a new process group with no
shell, feed stdin, drain stdout and stderr into bounded captures, wait on a pidfd for the
leader, and on timeout or abort SIGTERM the group (a sandbox runner's descendants instead,
when ``plan.runner``) then SIGKILL the group after the grace. When the leader is gone,
whatever it left (group members, daemons that left the group) is swept, and only then are
the pipes drained to their end. Everything happens on the calling thread with ``poll``; the
only helper thread is the one that spawns a plan with ``restrict`` (or a cgroup to join),
and it ends at the spawn.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from stockade.errors import ProgramNotFound, SandboxUnavailable, SpawnFailed, Unsupported
from stockade.plugin import settings as check
from stockade.request.plan import LaunchPlan, Probe
from stockade.request.result import ProcessOutcome
from stockade.run.executor import AbortToken, Executor

from . import limits, reaper
from .capture import KEEP_HOURS, SpillDir, StreamCapture
from .warden import Warden

_CHUNK = 1 << 16
_DRAIN_AFTER_EXIT = 1.0  # seconds to read what is buffered in the pipes once all is killed
SETTINGS: dict[str, check.Check] = {
    "spill_dir": check.path,
    "spill_keep_hours": check.hours,
    "reap": check.flag,
}
_POLL_IN = select.POLLIN | select.POLLHUP | select.POLLERR


class LocalExecutor(Executor):
    """Runs plans as local processes. Settings: ``spill_dir``, ``spill_keep_hours`` (default
    24), ``reap`` (default true)."""

    PLUGIN_NAME = "local"

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        settings = check.parse("local", self.options, SETTINGS)
        self._spill = SpillDir(
            settings.get("spill_dir"), keep_hours=settings.get("spill_keep_hours", KEEP_HOURS)
        )
        self._reap = bool(settings.get("reap", True))
        self._warden = Warden()

    @classmethod
    def probe(cls) -> Probe:
        """Needs Linux pidfds, /proc child lists and the subreaper prctl."""
        if not hasattr(os, "pidfd_open"):
            return Probe(False, "os.pidfd_open is missing (needs Linux 5.3 and Python 3.9)")
        if not os.path.exists(f"/proc/self/task/{os.getpid()}/children"):
            return Probe(False, "/proc/*/children is missing (kernel without CONFIG_PROC_CHILDREN)")
        launcher = limits.prlimit()
        if launcher is None:
            how = "resource limits: refused (util-linux prlimit is missing)"
        elif limits.processes_enforced_by() == "cgroup":
            how = f"resource limits by {launcher}; processes by a pids cgroup (root)"
        elif limits.root_exempt():
            how = (
                f"resource limits by {launcher}, but not processes: the kernel exempts root "
                "and no cgroup v1 pids hierarchy is writable"
            )
        else:
            how = f"resource limits by {launcher}"
        return Probe(True, f"process groups, pidfds, child subreaper, warden for host death; {how}")

    def run(self, plan: LaunchPlan, *, abort: AbortToken | None = None) -> ProcessOutcome:
        """Run ``plan`` to completion (or timeout, or abort) and report what happened."""
        limits.no_core_dumps()
        if plan.limits.any():
            launcher = limits.prlimit()
            if launcher is None:
                raise Unsupported(
                    "resource limits need util-linux's prlimit, owned by root in /usr/bin or "
                    "/bin; there is none here",
                    hint="install util-linux, or drop the limits (--memory-mb, [limits])",
                    details={"option": "limits"},
                )
            args = limits.launcher_args(launcher, plan.limits)
            plan = attrs.evolve(
                plan, executable=launcher, argv=(*args, plan.executable, *plan.argv[1:])
            )
        run_id = os.urandom(8).hex()
        cgroup = None
        if plan.limits.processes is not None and limits.root_exempt():
            cgroup = limits.PidsCgroup.make(run_id, plan.limits.processes)
            if cgroup is None:  # the kernel would ignore RLIMIT_NPROC: refuse, never pretend
                raise Unsupported(
                    "a process limit cannot be enforced for root here: the kernel exempts "
                    "root from RLIMIT_NPROC and no cgroup v1 pids hierarchy is writable",
                    hint="drop limits.processes, run Stockade as an ordinary user, or make "
                    "/sys/fs/cgroup/pids writable",
                    details={"option": "processes"},
                )
        try:
            outcome = self._run(plan, run_id, cgroup, abort)
        finally:
            if cgroup is not None:
                cgroup.remove()
        hit = limits.limit_hit(plan.limits, outcome)
        if hit is None and cgroup is not None and cgroup.hit() and outcome.exit_code != 0:
            hit = "processes"
        return attrs.evolve(outcome, limit_hit=hit) if hit else outcome

    def _run(
        self,
        plan: LaunchPlan,
        run_id: str,
        cgroup: limits.PidsCgroup | None,
        abort: AbortToken | None,
    ) -> ProcessOutcome:
        env = dict(plan.env)
        env[reaper.MARKER] = run_id
        reaper.start_run(run_id)  # before the spawn, so no sweep can mistake it for a leftover
        # The warden hears of the run before the spawn too: a host killed between the spawn
        # and the group report still leaves the warden the mark to kill by.
        self._warden.watch(run_id)
        start = time.monotonic()
        try:
            proc, spawner = self._spawn(plan, env, cgroup)
        except BaseException:
            reaper.end_run(run_id)
            self._warden.release(run_id)
            raise
        self._warden.watch(run_id, proc.pid)
        try:
            sweep = self._reap_tree(run_id, proc.pid)
            try:
                watch = _Run(plan, proc, start=start, abort=abort, spill=self._spill, sweep=sweep)
            except BaseException:
                _abandon(proc, sweep)  # e.g. no fd left for the pidfd: never leave it running
                raise
            return watch.wait()
        finally:
            if spawner is not None:
                spawner.finish()  # only now: the forking thread's end is a parent death
            reaper.end_run(run_id)
            self._warden.release(run_id)

    def _spawn(
        self, plan: LaunchPlan, env: dict[str, str], cgroup: limits.PidsCgroup | None
    ) -> tuple[subprocess.Popen[bytes], _Spawner | None]:
        if self._reap:
            reaper.ensure_subreaper()
        try:
            if plan.restrict is None and cgroup is None:
                return _popen(plan, env), None
            spawner = _Spawner(plan, env, cgroup, plan.restrict)
            return spawner.spawn(), spawner
        except FileNotFoundError:
            raise ProgramNotFound(
                f"program not found: {plan.executable}",
                hint="it was removed after it was resolved; check the path",
                details={"program": plan.executable},
            ) from None
        except OSError as error:
            why = errno.errorcode.get(error.errno or 0, "error")
            raise SpawnFailed(
                f"cannot start {plan.executable}: {error.strerror} ({why})",
                hint="check that it is an executable file you may run",
                details={"program": plan.executable, "errno": why},
            ) from None

    def _reap_tree(self, run_id: str, pgid: int) -> Callable[[], None]:
        def finish() -> None:
            if not self._reap:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
                return
            exclude = {self._warden.pid} if self._warden.pid is not None else set()
            reaper.sweep(run_id, pgid, exclude)

        return finish

    def close(self) -> None:
        """Stop the warden."""
        self._warden.close()


def _popen(
    plan: LaunchPlan, env: dict[str, str], null: int | None = None
) -> subprocess.Popen[bytes]:
    """Start the plan's process; ``null``: ``/dev/null`` opened already, for its stdin."""
    stdin: int = subprocess.DEVNULL if null is None else null
    return subprocess.Popen(
        plan.argv,
        executable=plan.executable,
        cwd=plan.cwd,
        env=env,
        stdin=subprocess.PIPE if plan.stdin else stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        close_fds=True,
        pass_fds=plan.pass_fds,
        # A new session also makes the process the leader of a new group: killpg reaches it.
        start_new_session=plan.new_session,
        process_group=None if plan.new_session else 0,
    )


class _Spawner:
    """A fresh thread that joins the run's cgroup, restricts itself, spawns, and then waits.

    Landlock, seccomp, ``no_new_privs`` and (cgroup v1) cgroup membership bind the calling
    thread and what it starts; the host's other threads never carry them, and no Python runs
    in the forked child. The thread stays parked until the run is over: the kernel counts a
    child's parent death (``PR_SET_PDEATHSIG``, bwrap's ``--die-with-parent``) from the
    thread that forked it, so a thread that ended at once would kill such a command.
    """

    def __init__(
        self,
        plan: LaunchPlan,
        env: dict[str, str],
        cgroup: limits.PidsCgroup | None,
        restrict: Callable[[], None] | None,
    ) -> None:
        self._plan, self._env, self._cgroup, self._restrict = plan, env, cgroup, restrict
        self._spawned = threading.Event()
        self._done = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="stockade-spawner", daemon=True)

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the process from the thread; raise what the thread could not do."""
        self._thread.start()
        self._spawned.wait()
        if self._error is not None or self._proc is None:
            self.finish()
            raise self._error or RuntimeError("the spawning thread started nothing")
        return self._proc

    def finish(self) -> None:
        """Let the thread end (the run is over)."""
        self._done.set()
        self._thread.join()

    def _work(self) -> None:
        # /dev/null opened before the thread is restricted: under a supervisor, an open
        # made after it would be a round trip to it for every run.
        null = None if self._plan.stdin else os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        try:
            try:
                if self._cgroup is not None:
                    self._cgroup.join()  # first: a restricted thread could not write there
                if self._restrict is not None:
                    self._restrict()
            except Exception as error:  # noqa: BLE001 - handed to the caller as a refusal
                self._error = SandboxUnavailable(
                    f"the sandbox could not be applied to the spawning thread: {error}",
                    hint="run `stockade doctor`; nothing was started",
                )
                return
            try:
                self._proc = _popen(self._plan, self._env, null)
            except BaseException as error:  # noqa: BLE001 - re-raised by spawn()
                self._error = error
                return
        finally:
            if null is not None:
                os.close(null)
            self._spawned.set()
        self._done.wait()


def _abandon(proc: subprocess.Popen[bytes], sweep: Callable[[], None]) -> None:
    """Kill a process that cannot be watched, with its group and leftovers, and close its pipes."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        proc.wait()
    sweep()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


class _Run:
    """The poll loop of one running process."""

    def __init__(
        self,
        plan: LaunchPlan,
        proc: subprocess.Popen[bytes],
        *,
        start: float,
        abort: AbortToken | None,
        spill: SpillDir,
        sweep: Callable[[], None],
    ) -> None:
        self.plan = plan
        self.proc = proc
        self.abort = abort
        self.sweep = sweep
        self.start = start
        self.deadline = self.start + plan.timeout
        if proc.stdout is None or proc.stderr is None:
            raise RuntimeError("the process was started without output pipes")
        self.captures = {
            proc.stdout.fileno(): StreamCapture("stdout", plan.output_limit, spill),
            proc.stderr.fileno(): StreamCapture("stderr", plan.output_limit, spill),
        }
        self.stdin_data = memoryview(plan.stdin)
        self.stdin_fd = proc.stdin.fileno() if proc.stdin is not None else -1
        self.pidfd = os.pidfd_open(proc.pid)
        self.poller = select.poll()
        self.open_fds = set(self.captures)
        for fd in self.open_fds:
            self.poller.register(fd, select.POLLIN)
        self.poller.register(self.pidfd, select.POLLIN)
        if self.stdin_fd >= 0:
            os.set_blocking(self.stdin_fd, False)
            self.poller.register(self.stdin_fd, select.POLLOUT)
        if abort is not None:
            self.poller.register(abort.fileno(), select.POLLIN)
        self.timed_out = False
        self.aborted = False
        self.kill_at: float | None = None

    def wait(self) -> ProcessOutcome:
        try:
            returncode = self._until_exit()
            end = time.monotonic()
            self.sweep()
            self._drain(time.monotonic() + _DRAIN_AFTER_EXIT)
        except BaseException:
            self._kill(signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                self.proc.wait()
            self.sweep()
            for capture in self.captures.values():
                capture.abandon()
            raise
        finally:
            self._close()
        stdout, stderr = (capture.finish() for capture in self.captures.values())
        return ProcessOutcome(
            returncode if returncode >= 0 else None,
            signal.Signals(-returncode).name if returncode < 0 else None,
            timed_out=self.timed_out,
            aborted=self.aborted,
            duration=end - self.start,
            stdout=stdout,
            stderr=stderr,
        )

    def _until_exit(self) -> int:
        while True:
            now = time.monotonic()
            if self.kill_at is None and not (self.timed_out or self.aborted):
                if now >= self.deadline:
                    self.timed_out = True
                    self._terminate(now)
                elif self.abort is not None and self.abort.aborted:
                    self.aborted = True
                    self._terminate(now)
            elif self.kill_at is not None and now >= self.kill_at:
                self._kill(signal.SIGKILL)
                self.kill_at = float("inf")
            wake = self.kill_at if self.kill_at is not None else self.deadline
            timeout_ms = max(0, int((wake - now) * 1000) + 1) if wake != float("inf") else None
            for fd, events in self.poller.poll(timeout_ms):
                if fd == self.pidfd:
                    return self.proc.wait()
                if fd in self.open_fds:
                    self._read(fd)
                elif fd == self.stdin_fd:
                    self._write_stdin(events)
                elif self.abort is not None and fd == self.abort.fileno():
                    self.poller.unregister(fd)

    def _terminate(self, now: float) -> None:
        """Send the grace signal, and set when SIGKILL follows."""
        if self.plan.runner:
            # The command runs below the runner, in a session of its own: SIGTERM to the
            # group would reach only the runner, whose death kills the command outright.
            for pid in reaper.descendants(self.proc.pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGTERM)
        else:
            self._kill(signal.SIGTERM)
        self.kill_at = now + self.plan.kill_grace

    def _kill(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def _read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        if not chunk:
            self.poller.unregister(fd)
            self.open_fds.discard(fd)
            return
        capture = self.captures[fd]
        capture.feed(chunk)
        if self.plan.on_output is not None:
            self.plan.on_output(capture.name, chunk)

    def _write_stdin(self, events: int) -> None:
        if events & select.POLLOUT and self.stdin_data:
            try:
                written = os.write(self.stdin_fd, self.stdin_data[:_CHUNK])
            except BlockingIOError:
                return
            except (BrokenPipeError, OSError):
                written = len(self.stdin_data)
            self.stdin_data = self.stdin_data[written:]
            if self.stdin_data:
                return
        self._close_stdin()

    def _close_stdin(self) -> None:
        if self.stdin_fd >= 0:
            self.poller.unregister(self.stdin_fd)
            if self.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
            self.stdin_fd = -1

    def _drain(self, until: float) -> None:
        """Read the pipes to their end now that every writer was killed (bounded in time)."""
        self._close_stdin()
        self.poller.unregister(self.pidfd)
        while self.open_fds:
            left = until - time.monotonic()
            if left <= 0:
                return
            for fd, _events in self.poller.poll(int(left * 1000) + 1):
                if fd in self.open_fds:
                    self._read(fd)

    def _close(self) -> None:
        self._close_stdin()
        os.close(self.pidfd)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
