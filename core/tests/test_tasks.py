"""Background tasks through a real host: live output, kill, owners, limits, close."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from stockade.config.schema import Config
from stockade.errors import PolicyDenied
from stockade.request.spec import ExecRequest
from stockade.run.tasks import Tasks, TooManyTasks, UnknownTask

FULL = {"mode": "danger-full-access", "timeout": 60}


def _request(argv, cwd, **kw) -> ExecRequest:
    return ExecRequest(argv, str(cwd), **{**FULL, **kw})


def _until(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("timed out waiting")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.fixture
def host(make_host):
    return make_host(allow_all=True, config=Config())


def test_output_is_read_as_it_is_printed_and_the_task_completes(host, tmp_path):
    gate = tmp_path / "go"
    script = (
        "import os, sys, time\n"
        "print('one', flush=True)\n"
        "while not os.path.exists(sys.argv[1]): time.sleep(0.01)\n"
        "print('two', flush=True); print('err', file=sys.stderr)\n"
    )
    info = host.start(_request([sys.executable, "-c", script, str(gate)], tmp_path), owner="a")
    assert info.task_id.startswith("task-") and info.status == "running"
    first = _until(lambda: host.read_output(info.task_id, owner="a").stdout)
    assert first == "one\n"
    assert host.read_output(info.task_id, owner="a").stdout == ""  # nothing new yet
    gate.write_text("")
    _until(lambda: host.list_tasks(owner="a")[0].status != "running")
    last = host.read_output(info.task_id, owner="a")
    assert (last.stdout, last.stderr, last.status) == ("two\n", "err\n", "completed")
    assert last.info.exit_code == 0 and last.info.result is not None
    assert last.info.result.stdout.text == "one\ntwo\n"  # the result holds the whole stream
    assert not last.lossy


def test_kill_ends_the_task_and_everything_it_started(host, tmp_path):
    argv = ["sh", "-c", "sleep 30 & echo $! > child; echo $$ > pid; wait"]
    info = host.start(_request(argv, tmp_path), owner="a")
    _until(lambda: (tmp_path / "child").exists() and (tmp_path / "pid").exists())
    pids = [int((tmp_path / n).read_text()) for n in ("pid", "child")]
    assert all(_alive(p) for p in pids)  # the control
    killed = host.kill(info.task_id, owner="a")
    assert killed.status == "killed" and killed.signal is not None
    _until(lambda: not any(_alive(p) for p in pids), timeout=30)


def test_another_owner_can_neither_see_read_nor_kill_a_task(host, tmp_path):
    info = host.start(_request(["sleep", "30"], tmp_path), owner="a")
    assert host.list_tasks(owner="b") == []
    for call in (host.read_output, host.kill):
        with pytest.raises(UnknownTask) as error:
            call(info.task_id, owner="b")
        assert error.value.code == "unknown_task"
    with pytest.raises(UnknownTask) as missing:
        host.read_output("task-999", owner="b")
    assert str(missing.value).replace("999", "") == str(error.value).replace(
        info.task_id.split("-")[1], ""
    )  # the same answer as for a task that does not exist
    assert host.list_tasks(owner="a")[0].status == "running"  # untouched
    assert host.kill(info.task_id, owner="a").status == "killed"


def test_unread_output_past_the_buffer_is_dropped_and_the_read_says_so(host, tmp_path):
    host._tasks = Tasks(buffer=1000)
    script = "import sys; sys.stdout.write('x' * 100000)"
    info = host.start(_request([sys.executable, "-c", script], tmp_path), owner="a")
    _until(lambda: host.list_tasks(owner="a")[0].status == "completed")
    out = host.read_output(info.task_id, owner="a")
    assert out.lossy and out.dropped_bytes == 100000 - 1000
    assert out.stdout == "x" * 1000  # the newest bytes are kept
    assert out.info.result.stdout.total_bytes == 100000
    again = host.read_output(info.task_id, owner="a")
    assert not again.lossy and again.stdout == ""


def test_an_owner_may_run_only_so_many_tasks_at_once(host, tmp_path):
    host._tasks = Tasks(per_owner=2)
    a = [host.start(_request(["sleep", "30"], tmp_path), owner="a") for _ in range(2)]
    with pytest.raises(TooManyTasks) as error:
        host.start(_request(["sleep", "30"], tmp_path), owner="a")
    assert error.value.code == "too_many_tasks"
    other = host.start(_request(["sleep", "30"], tmp_path), owner="b")  # its own count
    host.kill(a[0].task_id, owner="a")
    host.start(_request(["true"], tmp_path), owner="a")  # room again
    host.kill(other.task_id, owner="b")


def test_closing_the_host_kills_every_task(make_host, tmp_path):
    host = make_host(allow_all=True, config=Config())
    done = []
    host.on_task_done(done.append)
    for n in range(3):
        argv = ["sh", "-c", f"echo $$ > pid{n}; exec sleep 30"]
        host.start(_request(argv, tmp_path), owner="a")
    _until(lambda: all((tmp_path / f"pid{n}").exists() for n in range(3)))
    pids = [int((tmp_path / f"pid{n}").read_text()) for n in range(3)]
    assert all(_alive(p) for p in pids)
    host.close()
    assert not any(_alive(p) for p in pids)
    assert sorted(i.status for i in done) == ["killed"] * 3


def test_a_denied_command_is_refused_at_start_and_no_task_is_made(make_host, tmp_path):
    from stockade.request.spec import Profile

    profile = Profile(name="ci", programs=("echo",), workspace=str(tmp_path))
    host = make_host(config=Config(agents={"ci": profile}))  # the built-in policy
    with pytest.raises(PolicyDenied):
        host.start(_request(["rm", "-rf", str(tmp_path / "x")], tmp_path, profile="ci"), owner="a")
    assert host.list_tasks(owner="a") == []


def test_a_secret_never_shows_in_live_output_even_split_across_reads(make_host, tmp_path):
    secret = "ghp_" + os.urandom(12).hex()
    host = make_host(
        allow_all=True, config=Config(), environ={**os.environ, "STOCKADE_SECRET_GH": secret}
    )
    gate = tmp_path / "go"
    script = (
        "import os, sys, time\n"
        "s = os.environ['TOKEN']\n"
        "sys.stdout.write('a:' + s[:6]); sys.stdout.flush()\n"
        "while not os.path.exists(sys.argv[1]): time.sleep(0.01)\n"
        "sys.stdout.write(s[6:] + ' done\\n')\n"
    )
    request = _request(
        [sys.executable, "-c", script, str(gate)], tmp_path, credentials={"TOKEN": "gh"}
    )
    info = host.start(request, owner="a")
    seen = ""
    for _ in range(20):  # reads while the first half waits (held back: it could be a form)
        seen += host.read_output(info.task_id, owner="a").stdout
        time.sleep(0.02)
    gate.write_text("")
    _until(lambda: host.list_tasks(owner="a")[0].status == "completed")
    seen += host.read_output(info.task_id, owner="a").stdout
    assert secret[:6] not in seen and secret not in seen
    assert seen.startswith("a:") and seen.endswith(" done\n"), seen
