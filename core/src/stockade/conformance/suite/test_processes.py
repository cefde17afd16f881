"""Process attacks: host environments, signals, tracing, TIOCSTI, daemons, floods."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stockade.confine.promises import Promise
from stockade.conformance import procs


@pytest.fixture
def victim(box):
    """A live host process holding the canary in its environment."""
    proc = subprocess.Popen(
        ["sleep", "300"], env={"PATH": os.environ["PATH"], "VICTIM_API_TOKEN": box.canary}
    )
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def canary_process(box):
    """A live host process holding the canary on its command line."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", box.canary])
    yield proc
    proc.kill()
    proc.wait()


SCAN_PROC = """
import json, os
found, pids = [], []
for name in os.listdir("/proc"):
    if name.isdigit():
        pids.append(int(name))
        try:
            found.append(open(f"/proc/{name}/environ", "rb").read().decode(errors="replace"))
        except OSError:
            pass
print(json.dumps({"pids": pids, "environs": found, "env": dict(os.environ)}))
"""


@pytest.mark.promise(Promise.PROCESS_ISOLATION)
def test_host_environments_are_invisible(make_host, box, victim, mode):
    from stockade.config.schema import Config

    environ = {**os.environ, "AMBIENT_SECRET_KEY": box.canary, "GITHUB_TOKEN": box.canary}
    host = make_host(allow_all=True, config=Config(sandbox=box.sandbox), environ=environ)
    result = host.run(box.py(SCAN_PROC, mode=mode))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    assert box.canary not in result.stdout.text
    assert out["env"]["HOME"] == str(box.home)  # control: the resolved environment arrived
    assert out["environs"], "control: the command's own /proc/self/environ is readable"


@pytest.mark.promise(Promise.PID_NAMESPACE)
def test_host_processes_are_not_even_listed(host, box, victim):
    result = host.run(box.py(SCAN_PROC))
    out = json.loads(result.stdout.text)
    assert victim.pid not in out["pids"]
    assert len(out["pids"]) < 5, out["pids"]  # a PID namespace: bwrap's init and ourselves


READ_OTHERS = r"""
import ctypes, json, os, subprocess, sys, tempfile, time
victim, host, here, scratch = int(sys.argv[1]), int(sys.argv[2]), os.getcwd(), tempfile.mkdtemp()
out = {}
def attempt(name, fn):
    try:
        out[name] = fn()
    except OSError as error:
        out[name] = "refused: " + (error.strerror or str(error.errno))
def read(path, **kw):
    def go():
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC, **kw)
        try:
            return os.read(fd, 1 << 16).decode(errors="replace")
        finally:
            os.close(fd)
    return go
class How(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]
libc = ctypes.CDLL(None, use_errno=True)
def openat2(path):
    def go():
        how = How(os.O_RDONLY | os.O_CLOEXEC, 0, 0)
        fd = libc.syscall(437, -100, path.encode(), ctypes.byref(how), ctypes.sizeof(how))
        if fd < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        return read(f"/dev/fd/{fd}")()
    return go
for who, pid in (("victim", victim), ("host", host)):
    for name in ("cmdline", "environ", "status", "stat", "comm", "maps", "task/%d/cmdline" % pid):
        attempt(f"{who}:{name}", read(f"/proc/{pid}/{name}"))
    attempt(f"{who}:spelled", read(f"//proc/./{pid}//cmdline"))
    attempt(f"{who}:dotdot", read(f"/proc/self/../{pid}/cmdline"))
    attempt(f"{who}:openat2", openat2(f"/proc/{pid}/cmdline"))
    attempt(f"{who}:relative", read(f"{pid}/cmdline", dir_fd=os.open("/proc", os.O_RDONLY)))
    os.chdir("/proc")
    attempt(f"{who}:cwd", read(f"{pid}/cmdline"))
    os.chdir(here)
    link = os.path.join(scratch, f"link-{who}")
    os.symlink(f"/proc/{pid}/cmdline", link)
    attempt(f"{who}:symlink", read(link))
    try:
        path_fd = os.open(f"/proc/{pid}/cmdline", os.O_PATH)
    except OSError as error:
        out[f"{who}:o_path"] = "refused: " + error.strerror
    else:
        attempt(f"{who}:o_path", read(f"/proc/self/fd/{path_fd}"))
        attempt(f"{who}:o_path_dev", read(f"/dev/fd/{path_fd}"))
# controls: the command's own entries, and a child's
child = subprocess.Popen(["sleep", "30"])
time.sleep(0.1)
attempt("control:self", read("/proc/self/cmdline"))
attempt("control:pid", read(f"/proc/{os.getpid()}/status"))
attempt("control:thread", read("/proc/thread-self/stat"))
attempt("control:fd", lambda: str(len(os.listdir("/proc/self/fd"))))
attempt("control:child", read(f"/proc/{child.pid}/cmdline"))
attempt("control:meminfo", read("/proc/meminfo"))
mine = os.path.join(scratch, "mine.txt")
open(mine, "w").write("mine")
attempt("control:fd_file", read(f"/proc/self/fd/{os.open(mine, os.O_RDONLY)}"))
os.chdir(scratch)
attempt("control:cwd", read("/proc/self/cwd/mine.txt"))
os.chdir(here)
attempt("control:exe", lambda: str(open("/proc/self/exe", "rb").read(4)))
child.kill()
print(json.dumps(out))
"""


@pytest.mark.promise(Promise.PROCESS_ENTRIES)
def test_other_processes_entries_cannot_be_opened(host, box, canary_process, mode):
    """Another process's command line, status and memory map, by every spelling; the
    command's own entries and its child's are the control."""
    # The host is this process (under Landlock, the command's parent's process).
    result = host.run(box.py(READ_OTHERS, str(canary_process.pid), str(os.getpid()), mode=mode))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    leaked = {
        k: v for k, v in out.items() if not k.startswith("control") and not v.startswith("refused")
    }
    assert not leaked, leaked
    assert box.canary not in result.stdout.text
    assert "sleep" in out["control:child"], out
    assert "python" in out["control:self"], out
    assert "Tgid" in out["control:pid"], out
    assert out["control:fd_file"] == out["control:cwd"] == "mine", out
    assert "ELF" in out["control:exe"], out
    assert not [k for k, v in out.items() if k.startswith("control") and v.startswith("refused")]
    seen = Path(f"/proc/{canary_process.pid}/cmdline").read_text()
    assert box.canary in seen  # control: the host reads it


SIGNAL_AND_TRACE = """
import ctypes, json, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
pid = int(sys.argv[1])
out = {}
try:
    os.kill(pid, signal.SIGKILL)
    out["kill"] = "sent"
except OSError as e:
    out["kill"] = e.strerror
def sys_errno(*args):
    rc = libc.syscall(*[ctypes.c_long(a) for a in args])
    return "ok" if rc >= 0 else os.strerror(ctypes.get_errno())
out["ptrace_attach_init"] = sys_errno(101, 16, 1, 0, 0)
out["ptrace_traceme"] = sys_errno(101, 0, 0, 0, 0)
buf = ctypes.create_string_buffer(8)
iov = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 8)
out["process_vm_readv"] = sys_errno(310, 1, ctypes.addressof(iov), 1, ctypes.addressof(iov), 1, 0)
print(json.dumps(out))
"""


@pytest.mark.promise(Promise.PROCESS_ISOLATION)
def test_host_processes_cannot_be_signalled_or_traced(host, box, victim, mode):
    result = host.run(box.py(SIGNAL_AND_TRACE, str(victim.pid), mode=mode))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    time.sleep(0.1)
    assert victim.poll() is None, "the host process was killed from inside the sandbox"
    # Not there (a PID namespace), or there and out of reach (Landlock's signal scope).
    assert out["kill"] in ("No such process", "Operation not permitted"), out
    assert out["ptrace_attach_init"] == "Operation not permitted"
    assert out["ptrace_traceme"] == "Operation not permitted"
    assert out["process_vm_readv"] == "Operation not permitted"


TIOCSTI = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
out = {}
char = ctypes.c_char(b"x")
for name, request in (("TIOCSTI", 0x5412), ("TIOCSTI_high_bits", 0x1_0000_5412),
                      ("TIOCLINUX", 0x541C), ("control_TCGETS", 0x5401)):
    rc = libc.syscall(ctypes.c_long(16), ctypes.c_long(0), ctypes.c_ulong(request),
                      ctypes.byref(char))
    out[name] = "ok" if rc >= 0 else os.strerror(ctypes.get_errno())
print(json.dumps(out))
"""


@pytest.mark.promise(Promise.NO_TERMINAL_INJECTION)
def test_terminal_injection_is_refused(host, box):
    # stdin is /dev/null: without the filter each ioctl fails with ENOTTY, not EPERM.
    result = host.run(box.py(TIOCSTI))
    out = json.loads(result.stdout.text)
    assert out["control_TCGETS"] == "Inappropriate ioctl for device"
    for name in ("TIOCSTI", "TIOCSTI_high_bits", "TIOCLINUX"):
        assert out[name] == "Operation not permitted", (name, out)


@pytest.mark.promise(Promise.NOTHING_OUTLIVES)
@pytest.mark.parametrize("how", ["setsid", "double-fork", "nohup"])
def test_daemons_do_not_outlive_the_command(host, box, how):
    marker = f"{os.getpid() % 1000}.{time.monotonic_ns() % 100000}"
    launch = {
        "setsid": f"setsid sleep {marker} > /dev/null 2>&1 &",
        "double-fork": f"( ( sleep {marker} > /dev/null 2>&1 & ) & )",
        "nohup": f"nohup sleep {marker} > /dev/null 2>&1 &",
    }[how]
    result = host.run(box.request(["sh", "-c", f"{launch}\nsleep 0.2; echo started"]))
    assert result.stdout.text == "started\n"
    assert procs.wait_until(lambda: not procs.sleeping(marker), timeout=30), procs.sleeping(marker)


@pytest.mark.promise(Promise.NOTHING_OUTLIVES)
def test_a_timed_out_command_leaves_nothing(host, box):
    marker = f"{os.getpid() % 1000}.{time.monotonic_ns() % 100000}7"
    request = box.request(["sh", "-c", f"setsid sleep {marker} & sleep {marker}"])
    request = type(request)(
        request.argv,
        request.cwd,
        mode=request.mode,
        env=request.env,
        sandbox=box.sandbox,
        timeout=1,
    )
    result = host.run(request)
    assert result.timed_out
    assert procs.wait_until(lambda: not procs.sleeping(marker), timeout=30)


def _graced_host(make_host, box, kill_grace: float):
    from stockade.config.schema import Config, TimeoutConfig

    config = Config(sandbox=box.sandbox, timeout=TimeoutConfig(kill_grace=kill_grace))
    return make_host(allow_all=True, config=config)


def _timed(box, script: str, *, mode: str = "workspace-write", timeout: float = 1):
    request = box.request(["sh", "-c", script], mode=mode)
    return type(request)(
        request.argv,
        request.cwd,
        mode=request.mode,
        env=request.env,
        sandbox=box.sandbox,
        timeout=timeout,
    )


@pytest.mark.promise(Promise.NOTHING_OUTLIVES)
def test_a_timed_out_command_gets_sigterm_and_its_grace(make_host, box, mode):
    # The runner (bwrap) must not be what gets SIGTERM: its death would kill the command
    # before its trap runs. The trap prints, writes where it may, and exits 3.
    marker = f"{os.getpid() % 1000}.{time.monotonic_ns() % 100000}3"
    trapped = box.ws / "trapped"
    write = f"echo cleaned > {trapped}; " if mode == "workspace-write" else ""
    script = f'trap "{write}echo trapped; exit 3" TERM; echo started; sleep {marker} & wait'
    host = _graced_host(make_host, box, kill_grace=10)
    result = host.run(_timed(box, script, mode=mode))
    assert result.timed_out
    assert result.stdout.text == "started\ntrapped\n", result.stderr.text
    assert (result.exit_code, result.signal) == (3, None)
    assert result.duration_ms < 1000 + 5000  # it exited on SIGTERM, not at the SIGKILL
    if mode == "workspace-write":
        assert trapped.read_text() == "cleaned\n"
    assert procs.wait_until(lambda: not procs.sleeping(marker), timeout=30), procs.sleeping(marker)


@pytest.mark.promise(Promise.NOTHING_OUTLIVES)
def test_a_command_that_ignores_sigterm_is_killed_after_the_grace(make_host, box):
    marker = f"{os.getpid() % 1000}.{time.monotonic_ns() % 100000}5"
    host = _graced_host(make_host, box, kill_grace=0.5)
    result = host.run(_timed(box, f'trap "" TERM; echo started; sleep {marker}'))
    assert result.timed_out
    assert result.stdout.text == "started\n"
    assert (result.exit_code, result.signal) == (None, "SIGKILL")
    assert 1500 <= result.duration_ms < 1500 + 5000  # the timeout, then the whole grace
    assert procs.wait_until(lambda: not procs.sleeping(marker), timeout=30), procs.sleeping(marker)


@pytest.mark.promise(Promise.NOTHING_OUTLIVES)
def test_an_output_flood_is_bounded_and_spilled(host, box):
    result = host.run(box.request(["head", "-c", str(64 << 20), "/dev/zero"]))
    assert result.exit_code == 0
    assert result.stdout.truncated
    assert result.stdout.total_bytes == 64 << 20
    assert result.stdout.spill_path and os.path.getsize(result.stdout.spill_path) == 64 << 20
    assert len(result.stdout.text) < 2 << 20


@pytest.mark.promise(Promise.NOTHING_OUTLIVES)
def test_killed_by_a_signal_shows_in_the_exit_status(host, box):
    result = host.run(box.request(["sh", "-c", "kill -TERM $$"]))
    # A runner's init (bwrap) reports the command's death as 128+N; a command that is the
    # executor's own child reports the signal.
    assert (result.exit_code, result.signal) in ((128 + signal.SIGTERM, None), (None, "SIGTERM"))


CAPS = """
fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(fields["CapEff"].strip(), fields["CapPrm"].strip(), fields["NoNewPrivs"].strip(),
      fields["Seccomp"].strip())
"""


@pytest.mark.promise(Promise.NO_CAPABILITIES)
def test_no_capabilities_even_as_root(host, box, mode):
    result = host.run(box.py(CAPS, mode=mode))
    assert result.stdout.text.split() == ["0000000000000000", "0000000000000000", "1", "2"]
