"""The kit's limit attacks (:mod:`stockade.conformance.suite.test_limits`), also against the
unconfined provider (the executor enforces limits, not the sandbox); the process limit as
the local executor holds it, for users and for root; the spawning thread of a run."""

from __future__ import annotations

import os

import pytest

from stockade.conformance import procs
from stockade.conformance.suite import test_limits as kit
from stockade.conformance.suite.test_limits import *  # noqa: F403
from stockade.conformance.suite.test_limits import _host, _run

from .conftest import PYTHON

UNCONFINED = [
    kit.test_memory_past_the_limit_fails_and_the_result_says_why,
    kit.test_a_file_past_the_size_limit_is_cut_off,
    kit.test_cpu_time_runs_out,
    kit.test_a_process_flood_under_a_timeout_leaves_nothing_behind,
    kit.test_no_core_dumps,
    kit.test_a_command_that_dies_with_its_parent_survives_a_spawning_thread,
]


@pytest.mark.sandboxes("none")
@pytest.mark.parametrize("attack", UNCONFINED, ids=[a.__name__[5:] for a in UNCONFINED])
def test_the_kits_limits_hold_unconfined(make_host, box, attack):
    attack(make_host, box)


@pytest.mark.sandboxes("none", "bubblewrap", "landlock")
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


@pytest.mark.sandboxes("none", "bubblewrap", "landlock")
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


@pytest.mark.sandboxes("none", "bubblewrap", "landlock")
def test_the_spawning_thread_lives_as_long_as_the_run(make_host, box):
    import threading

    root = os.getuid() == 0
    if not root and box.sandbox != "landlock":
        pytest.xfail("an ordinary user's run without Landlock spawns from its own thread")
    host = _host(make_host, box.sandbox, **({"processes": 40} if root else {}))
    # Seen by its process, not a file: a layered run's files are not seen while it runs.
    marker = f"1.{os.getpid() % 1000}37"
    runner = threading.Thread(target=_run, args=(host, box, ["sh", "-c", f"sleep {marker}"]))
    runner.start()
    try:
        assert procs.wait_until(lambda: procs.sleeping(marker), timeout=30)
        names = [t.name for t in threading.enumerate() if t.is_alive()]
        assert "stockade-spawner" in names, names
    finally:
        runner.join()
    assert "stockade-spawner" not in [t.name for t in threading.enumerate()]
