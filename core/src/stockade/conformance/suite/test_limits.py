"""Resource limits under the provider: memory, file size, CPU, floods, cores."""

from __future__ import annotations

import os
import signal
import time

import pytest

from stockade.config.schema import Config
from stockade.confine.promises import Promise
from stockade.conformance import procs
from stockade.conformance.ground import PYTHON
from stockade.request.spec import ExecRequest, Limits


def _host(make_host, sandbox: str, **limits: int):
    return make_host(allow_all=True, config=Config(sandbox=sandbox, limits=Limits(**limits)))


def _run(host, box, argv, *, timeout: float = 30):
    # (the project runs these against its unconfined provider too, which has only that mode)
    modes = box.provider.MODES
    mode = "workspace-write" if "workspace-write" in modes else "danger-full-access"
    env = {"HOME": str(box.home)}
    return host.run(
        ExecRequest(argv, str(box.ws), mode=mode, sandbox=box.sandbox, env=env, timeout=timeout)
    )


def _died_of(result, sig: signal.Signals) -> bool:
    return result.signal == sig.name or result.exit_code == 128 + sig


@pytest.mark.promise(Promise.LIMITS)
def test_memory_past_the_limit_fails_and_the_result_says_why(make_host, box):
    host = _host(make_host, box.sandbox, memory_mb=512)
    small = _run(host, box, [PYTHON, "-S", "-c", "b = bytearray(64 << 20); print(len(b))"])
    assert small.exit_code == 0 and small.stdout.text == f"{64 << 20}\n", small.stderr.text
    big = _run(host, box, [PYTHON, "-S", "-c", "b = bytearray(3 << 30); print('allocated')"])
    assert big.exit_code != 0 and "allocated" not in big.stdout.text
    assert "MemoryError" in big.stderr.text
    assert big.limit_hit == "memory"
    assert big.limits.memory_mb == 512


@pytest.mark.promise(Promise.LIMITS)
def test_a_file_past_the_size_limit_is_cut_off(make_host, box):
    host = _host(make_host, box.sandbox, file_size_mb=1)
    (box.ws / "out").mkdir()
    result = _run(host, box, ["sh", "-c", "head -c 4194304 /dev/zero > out/big"])
    assert _died_of(result, signal.SIGXFSZ) or result.exit_code != 0, result
    assert (box.ws / "out" / "big").stat().st_size <= 1 << 20
    assert result.limit_hit == "file_size"


@pytest.mark.promise(Promise.LIMITS)
def test_cpu_time_runs_out(make_host, box):
    host = _host(make_host, box.sandbox, cpu_seconds=1)
    start = time.monotonic()
    result = _run(host, box, [PYTHON, "-S", "-c", "while True: pass"], timeout=30)
    assert not result.timed_out and time.monotonic() - start < 20
    assert _died_of(result, signal.SIGKILL) or _died_of(result, signal.SIGXCPU), result
    assert result.limit_hit == "cpu"


@pytest.mark.promise(Promise.NOTHING_OUTLIVES)
def test_a_process_flood_under_a_timeout_leaves_nothing_behind(make_host, box):
    host = _host(make_host, box.sandbox)
    marker = f"{os.getpid() % 1000}.{time.monotonic_ns() % 100000}3"
    script = f"i=0; while [ $i -lt 1500 ]; do sleep {marker} & i=$((i+1)); done; wait"
    result = _run(host, box, ["sh", "-c", script], timeout=4)
    assert result.timed_out

    assert procs.wait_until(lambda: not procs.sleeping(marker), timeout=30), procs.sleeping(marker)


@pytest.mark.promise(Promise.LIMITS)
def test_no_core_dumps(make_host, box):
    host = _host(make_host, box.sandbox)
    result = _run(host, box, ["sh", "-c", "ulimit -c; ulimit -Hc"])
    assert result.stdout.text == "0\n0\n", result.stdout.text


@pytest.mark.promise(Promise.LIMITS)
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
