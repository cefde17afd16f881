"""Resource limits on every backend: memory, file size, CPU, processes, floods, cores."""

from __future__ import annotations

import os
import signal
import time

import pytest

from helpers import procs
from stockade.config.schema import Config
from stockade.request.spec import ExecRequest, Limits

from .conftest import PYTHON

pytestmark = pytest.mark.sandboxes("none", "bubblewrap", "landlock")


def _host(make_host, sandbox: str, **limits: int):
    return make_host(allow_all=True, config=Config(sandbox=sandbox, limits=Limits(**limits)))


def _run(host, box, argv, *, timeout: float = 30):
    mode = "danger-full-access" if box.sandbox == "none" else "workspace-write"
    env = {"HOME": str(box.home)}
    return host.run(
        ExecRequest(argv, str(box.ws), mode=mode, sandbox=box.sandbox, env=env, timeout=timeout)
    )


def _died_of(result, sig: signal.Signals) -> bool:
    return result.signal == sig.name or result.exit_code == 128 + sig


def test_memory_past_the_limit_fails_and_the_result_says_why(make_host, box):
    host = _host(make_host, box.sandbox, memory_mb=512)
    small = _run(host, box, [PYTHON, "-S", "-c", "b = bytearray(64 << 20); print(len(b))"])
    assert small.exit_code == 0 and small.stdout.text == f"{64 << 20}\n", small.stderr.text
    big = _run(host, box, [PYTHON, "-S", "-c", "b = bytearray(3 << 30); print('allocated')"])
    assert big.exit_code != 0 and "allocated" not in big.stdout.text
    assert "MemoryError" in big.stderr.text
    assert big.limit_hit == "memory"
    assert big.limits.memory_mb == 512


def test_a_file_past_the_size_limit_is_cut_off(make_host, box):
    host = _host(make_host, box.sandbox, file_size_mb=1)
    (box.ws / "out").mkdir()
    result = _run(host, box, ["sh", "-c", "head -c 4194304 /dev/zero > out/big"])
    assert _died_of(result, signal.SIGXFSZ) or result.exit_code != 0, result
    assert (box.ws / "out" / "big").stat().st_size <= 1 << 20
    assert result.limit_hit == "file_size"


def test_cpu_time_runs_out(make_host, box):
    host = _host(make_host, box.sandbox, cpu_seconds=1)
    start = time.monotonic()
    result = _run(host, box, [PYTHON, "-S", "-c", "while True: pass"], timeout=30)
    assert not result.timed_out and time.monotonic() - start < 20
    assert _died_of(result, signal.SIGKILL) or _died_of(result, signal.SIGXCPU), result
    assert result.limit_hit == "cpu"


def test_a_process_limit_holds_for_users_and_for_root(make_host, box):
    """An ordinary user gets ``RLIMIT_NPROC``; root, whom the kernel exempts from it, a pids
    cgroup. A machine where root has neither fails here: the limit would not hold."""
    from stockade_local import limits
    from stockade_local.executor import LocalExecutor

    how = limits.processes_enforced_by()
    assert how is not None, LocalExecutor.probe().detail
    if how == "cgroup":
        assert "processes by a pids cgroup" in LocalExecutor.probe().detail
    # RLIMIT_NPROC counts every task of the user (the host's threads too); a cgroup, only its
    # own. Either way, about 20 more than are there now may start.
    allowed = (0 if how == "cgroup" else _tasks_of_this_user()) + 20
    host = _host(make_host, box.sandbox, processes=allowed)
    result = _run(host, box, [PYTHON, "-S", "-c", FORK_200], timeout=30)
    said = (result.exit_code, result.signal, result.stdout.text, result.stderr.text[-2000:])
    assert result.stdout.text.startswith("forked "), said
    forked = int(result.stdout.text.split()[1])
    assert 0 < forked < 60, said  # about 20 of the 200 (other tasks come and go): it held
    assert "Resource temporarily unavailable" in result.stderr.text
    assert result.limit_hit == "processes"
    parent = f"{limits.PIDS_V1}/stockade"
    left = (
        [d for d in os.listdir(parent) if os.path.isdir(f"{parent}/{d}")] if how == "cgroup" else []
    )
    assert not left, f"cgroups left behind: {left}"


def _tasks_of_this_user() -> int:
    uid, count = os.getuid(), 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{pid}/task"))
            except OSError:
                pass
    return count


FORK_200 = """
import os, signal, sys, time
children = []
try:
    for _ in range(200):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children.append(pid)
except OSError as error:
    print("forked", len(children))
    print(error, file=sys.stderr)
    status = 1
else:
    print("forked", len(children))
    status = 0
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
sys.exit(status)
"""


def test_a_process_flood_under_a_timeout_leaves_nothing_behind(make_host, box):
    host = _host(make_host, box.sandbox)
    marker = f"{os.getpid() % 1000}.{time.monotonic_ns() % 100000}3"
    script = f"i=0; while [ $i -lt 1500 ]; do sleep {marker} & i=$((i+1)); done; wait"
    result = _run(host, box, ["sh", "-c", script], timeout=4)
    assert result.timed_out

    assert procs.wait_until(lambda: not procs.sleeping(marker), timeout=30), procs.sleeping(marker)


def test_no_core_dumps(make_host, box):
    host = _host(make_host, box.sandbox)
    result = _run(host, box, ["sh", "-c", "ulimit -c; ulimit -Hc"])
    assert result.stdout.text == "0\n0\n", result.stdout.text


def test_a_process_limit_root_cannot_have_is_refused(make_host, box, monkeypatch):
    """Where neither RLIMIT_NPROC (root) nor a pids cgroup can hold it, nothing runs."""
    from stockade.errors import Unsupported
    from stockade_local import limits

    if not limits.root_exempt():
        monkeypatch.setattr(limits, "root_exempt", lambda: True)  # as root would be
    monkeypatch.setattr(limits, "PIDS_V1", str(box.root / "no-cgroup-here"))
    host = _host(make_host, box.sandbox, processes=40)
    with pytest.raises(Unsupported, match="cannot be enforced for root"):
        _run(host, box, ["touch", str(box.ws / "ran")])
    assert not (box.ws / "ran").exists()


def test_a_command_that_dies_with_its_parent_survives_a_spawning_thread(make_host, box):
    """bwrap's --die-with-parent (PR_SET_PDEATHSIG) counts the thread that forked it: the
    spawning thread of a restricted or cgroup run must live as long as the run."""
    # As root a process limit makes the run spawn from a thread that joins a cgroup.
    host = _host(make_host, box.sandbox, **({"processes": 40} if os.getuid() == 0 else {}))
    script = (
        "import ctypes, signal, time\n"
        "ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG\n"
        "time.sleep(0.3)\nprint('alive')"
    )
    for _ in range(10):
        result = _run(host, box, [PYTHON, "-S", "-c", script])
        assert (result.exit_code, result.stdout.text) == (0, "alive\n"), result


def test_the_spawning_thread_lives_as_long_as_the_run(make_host, box):
    import threading

    root = os.getuid() == 0
    if not root and box.sandbox != "landlock":
        pytest.xfail("an ordinary user's run without Landlock spawns from its own thread")
    host = _host(make_host, box.sandbox, **({"processes": 40} if root else {}))
    (box.ws / "work").mkdir()
    runner = threading.Thread(
        target=_run, args=(host, box, ["sh", "-c", "touch work/started; sleep 1"])
    )
    runner.start()
    try:
        assert procs.wait_until((box.ws / "work" / "started").exists, timeout=30)
        names = [t.name for t in threading.enumerate() if t.is_alive()]
        assert "stockade-spawner" in names, names
    finally:
        runner.join()
    assert "stockade-spawner" not in [t.name for t in threading.enumerate()]
