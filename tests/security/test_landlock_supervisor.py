"""The Landlock supervisor attacked: every spelling of a path to a protected file, openat2
with every resolve flag, two threads racing the path against the check, a flood, and a
supervisor that dies. Each attack has its control: the same spelling to a file that is not
protected goes through (so a refusal is the rules', not a broken call)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from stockade_landlock import supervisor
from stockade_landlock.supervisor.rules import Rules
from stockade_landlock.supervisor.serve import Supervisor

pytestmark = [
    pytest.mark.sandboxes("landlock"),
    pytest.mark.skipif(supervisor.unavailable() is not None, reason="no supervisor here"),
]

PRELUDE = r"""
import ctypes, errno, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "done"
    except OSError as error:
        out[name] = error.strerror or errno.errorcode.get(error.errno, str(error.errno))
def write(path, text="PWNED\n", flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, **kw):
    def go():
        fd = os.open(path, flags, 0o644, **kw)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    return go
def call(rc):
    if rc < 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
"""

SPELLINGS = r"""
ws = os.getcwd()
os.mkdir("d"); open("ok.txt", "w").close(); open("f", "w").close()
os.symlink(".git", "l_dir"); os.symlink(".git/config", "l_file")
os.symlink("../.git", "d/up"); os.symlink("l_dir", "l_chain")
os.symlink(ws + "/.git/config", "l_abs"); os.symlink(".git/hooks/pre-commit", "l_dangling")
os.symlink("d", "l_ok"); os.symlink("ok.txt", "l_okfile")
hooks = os.open(".git/hooks", os.O_PATH)
cfg = os.open(".git/config", os.O_RDONLY)
git = os.open(".git", os.O_PATH)
okfd = os.open("ok.txt", os.O_RDONLY)
# symlinks at every component
attempt("symlink_dir", write("l_dir/config"))
attempt("symlink_file", write("l_file"))
attempt("symlink_up", write("d/up/hooks/post-checkout"))
attempt("symlink_chain", write("l_chain/config"))
attempt("symlink_abs", write("l_abs"))
attempt("symlink_dangling_creates", write("l_dangling"))
attempt("symlink_append", write("l_file", flags=os.O_WRONLY | os.O_APPEND))
# /proc and /dev spellings
attempt("proc_fd_dotdot", write(f"/proc/self/fd/{hooks}/../config"))
attempt("proc_fd_new", write(f"/proc/self/fd/{hooks}/pre-commit"))
attempt("proc_cwd", write("/proc/self/cwd/.git/config"))
attempt("proc_root", write(f"/proc/self/root{ws}/.git/config"))
attempt("dev_fd_dotdot", write(f"/dev/fd/{hooks}/../config"))
attempt("proc_thread_cwd", write("/proc/thread-self/cwd/.bashrc"))
attempt("proc_pid_cwd", write(f"/proc/{os.getpid()}/cwd/.bashrc"))
attempt("proc_reopen", write(f"/proc/self/fd/{cfg}", flags=os.O_WRONLY))
attempt("dev_fd_reopen", write(f"/dev/fd/{cfg}", flags=os.O_WRONLY))
attempt("proc_pid_reopen", write(f"/proc/{os.getpid()}/fd/{cfg}", flags=os.O_WRONLY))
# descriptors: of a protected folder, and of a folder swapped for a link to one
attempt("dirfd_git", write("config", dir_fd=git))
os.mkdir("sw"); swapped = os.open("sw", os.O_RDONLY | os.O_DIRECTORY)
os.rename("sw", "sw2"); os.symlink(".git", "sw")
attempt("control_dirfd_swapped", write("config", dir_fd=swapped))
# hard links
attempt("link", lambda: os.link(".git/config", "hl1"))
follow = 0x400  # AT_SYMLINK_FOLLOW (os.link's follow_symlinks makes a plain link())
attempt("link_follow", lambda: call(libc.linkat(-100, b"l_file", -100, b"hl2", follow)))
proc_cfg = f"/proc/self/fd/{cfg}".encode()
attempt("link_proc_fd", lambda: call(libc.linkat(-100, proc_cfg, -100, b"hl3", follow)))
attempt("link_empty_path", lambda: call(libc.linkat(cfg, b"", -100, b"hl4", 0x1000)))
attempt("link_into_git", lambda: os.link("ok.txt", ".git/hooks/pre-commit"))
# renames over and of protected names
attempt("rename_over_config", lambda: os.rename("f", ".git/config"))
attempt("rename_over_bashrc", lambda: os.replace("f", ".bashrc"))
attempt("rename_into_hooks", lambda: os.rename("f", ".git/hooks/pre-commit"))
attempt("rename_git_away", lambda: os.rename(".git", "g"))
attempt("rename_exchange", lambda: call(libc.renameat2(-100, b"f", -100, b".bashrc", 2)))
attempt("rename_noreplace_in_git", lambda: call(libc.renameat2(-100, b"f", -100, b".git/x", 1)))
# truncate, remove, make, mode and owner
attempt("truncate", lambda: os.truncate(".git/config", 0))
attempt("truncate_link", lambda: os.truncate("l_file", 0))
attempt("unlink", lambda: os.unlink(".bashrc"))
attempt("unlinkat_dir", lambda: os.rmdir(".git/hooks"))
attempt("mkfifo", lambda: os.mkfifo(".git/hooks/fifo"))
attempt("mkdir", lambda: os.mkdir(".git/hooks/d"))
attempt("symlink_in_git", lambda: os.symlink("/bin/sh", ".git/hooks/pre-push"))
attempt("tmpfile", lambda: os.close(os.open(".git/hooks", os.O_TMPFILE | os.O_WRONLY, 0o600)))
attempt("chmod", lambda: os.chmod(".git/hooks/post-checkout", 0o777))
attempt("chmod_link", lambda: os.chmod("l_file", 0o777))
attempt("fchmod_readonly_fd", lambda: os.fchmod(cfg, 0o777))
attempt("chown", lambda: os.chown(".bashrc", os.getuid(), os.getgid()))
# the supervisor's own call is Landlock's to judge: outside the roots, a system secret
attempt("outside_root", write("/etc/stockade-supervisor-test"))
attempt("system_secret", write("/etc/shadow", flags=os.O_WRONLY))
# controls: the same spellings to what is not protected
attempt("control_symlink", write("l_okfile", "ok\n"))
attempt("control_proc_root", write(f"/proc/self/root{ws}/ok.txt", "ok\n"))
attempt("control_proc_fd_dir", write(f"/proc/self/fd/{hooks}/../../ok.txt", "ok\n"))
attempt("control_symlink_dir", write("l_ok/new", "ok\n"))
attempt("control_dev_stdout", write("/dev/stdout", "", flags=os.O_WRONLY))
attempt("control_proc_reopen", write(f"/proc/self/fd/{okfd}", "ok\n", flags=os.O_WRONLY))
attempt("control_link", lambda: os.link("ok.txt", "ok2"))
attempt("control_rename", lambda: os.rename("ok2", "ok3"))
attempt("control_chmod", lambda: os.chmod("ok.txt", 0o600))
attempt("control_truncate", lambda: os.truncate("ok.txt", 0))
attempt("new_dotfile", write("d/.profile", "new\n"))  # a new protected name: refused too
print(json.dumps(out))
"""

PROTECTED = (".git/config", ".git/hooks/post-checkout", ".bashrc")


def _plant(box):
    (box.ws / ".git" / "hooks").mkdir(parents=True)
    (box.ws / ".git" / "config").write_text("[core]\n")
    (box.ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    hook = box.ws / ".git" / "hooks" / "post-checkout"
    hook.write_text("#!/bin/sh\necho mine\n")
    hook.chmod(0o755)
    (box.ws / ".bashrc").write_text("# mine\n")
    return {rel: ((box.ws / rel).read_bytes(), (box.ws / rel).stat().st_mode) for rel in PROTECTED}


def _unchanged(box, before):
    after = {rel: ((box.ws / rel).read_bytes(), (box.ws / rel).stat().st_mode) for rel in before}
    assert after == before
    hooks = box.ws / ".git" / "hooks"
    assert sorted(os.listdir(hooks)) == ["post-checkout"], os.listdir(hooks)
    assert sorted(os.listdir(box.ws / ".git")) == ["HEAD", "config", "hooks"]


def test_every_spelling_of_a_protected_path_is_refused_while_it_runs(host, box):
    before = _plant(box)
    result = host.run(box.py(PRELUDE + SPELLINGS))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text.splitlines()[-1])
    controls = {k: v for k, v in out.items() if k.startswith("control")}
    assert set(controls.values()) == {"done"}, controls
    attacks = {k: v for k, v in out.items() if not k.startswith("control")}
    assert "done" not in attacks.values(), {k: v for k, v in attacks.items() if v == "done"}
    assert out["control_dirfd_swapped"] == "done"  # ...into sw2, the folder the fd holds
    assert (box.ws / "sw2" / "config").read_text() == "PWNED\n"
    for name in ("outside_root", "system_secret"):  # Landlock refuses the supervisor too
        assert out[name] == "Permission denied", (name, out[name])
    names = ("symlink_file", "rename_over_bashrc", "link", "chmod", "truncate", "proc_root")
    for name in (*names, "new_dotfile"):
        assert out[name] == "Read-only file system", (name, out[name])  # as bubblewrap says
    _unchanged(box, before)
    assert not result.restored  # nothing to put back: nothing changed


OPENAT2 = r"""
class How(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]
os.symlink(".git", "l_dir")
open("ok.txt", "w").close()
def openat2(path, flags, resolve, mode=0):
    def go():
        how = How(flags | os.O_CLOEXEC, mode, resolve)
        call(libc.syscall(437, -100, path.encode(), ctypes.byref(how), ctypes.sizeof(how)))
    return go
W, C = os.O_WRONLY | os.O_TRUNC, os.O_WRONLY | os.O_CREAT
for resolve in range(64):
    if resolve & 0x18 == 0x18:
        continue  # RESOLVE_BENEATH with RESOLVE_IN_ROOT: EINVAL
    attempt(f"config-{resolve}", openat2(".git/config", W, resolve))
    attempt(f"link-{resolve}", openat2("l_dir/config", W, resolve))
    attempt(f"new-{resolve}", openat2(".git/hooks/pre-commit", C, resolve, 0o755))
    attempt(f"control-{resolve}", openat2("ok.txt", W, resolve))
print(json.dumps(out))
"""


def test_openat2_with_every_resolve_flag(host, box):
    before = _plant(box)
    result = host.run(box.py(PRELUDE + OPENAT2))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    for name, value in out.items():
        if name.startswith("control"):
            resolve = int(name.split("-")[1])
            cached = "Resource temporarily unavailable"  # RESOLVE_CACHED may answer EAGAIN
            assert value == "done" or (resolve & 0x20 and value == cached), (name, value)
        else:
            assert value != "done", (name, value)
    assert sum(v == "Read-only file system" for v in out.values()) >= 90  # the rules' refusal
    _unchanged(box, before)


RACE = r"""
import threading
N = int(sys.argv[1])
buf = ctypes.create_string_buffer(64)
paths = [b"ok.txt\0", b".git/config\0"]
stop = False
def flip():
    i = 0
    while not stop:
        ctypes.memmove(buf, paths[i & 1], len(paths[i & 1]))
        i += 1
racer = threading.Thread(target=flip)
racer.start()
counts = {}
for _ in range(N):
    fd = libc.open(buf, os.O_WRONLY | os.O_APPEND)
    if fd >= 0:
        os.write(fd, b"R\n")
        os.close(fd)
        counts["done"] = counts.get("done", 0) + 1
    else:
        name = os.strerror(ctypes.get_errno())
        counts[name] = counts.get(name, 0) + 1
stop = True
racer.join()
print(json.dumps(counts))
"""


def test_two_threads_racing_the_path_against_the_check_never_reach_it(host, box):
    before = _plant(box)
    (box.ws / "ok.txt").write_text("")
    result = host.run(box.py(PRELUDE + RACE, "3000"))
    assert result.exit_code == 0, result.stderr.text
    counts = json.loads(result.stdout.text)
    # Both paths were seen (the race ran), only the open one was written.
    assert counts.get("done", 0) > 0 and counts.get("Read-only file system", 0) > 0, counts
    assert (box.ws / "ok.txt").read_text().count("R\n") == counts["done"]
    _unchanged(box, before)


FLOOD = r"""
import time
open("started", "w").close()
end, n = time.monotonic() + float(sys.argv[1]), 0
while time.monotonic() < end:
    try:
        os.open(".git/config", os.O_WRONLY)
    except OSError:
        n += 1
print(n)
"""


def test_a_flood_of_calls_never_stalls_the_host(host, box):
    """While one command floods its supervisor (8 s of refused opens), another run starts,
    runs and ends: it is not queued behind the flood (it ends while the flood goes on)."""
    before = _plant(box)
    flood: dict[str, object] = {}
    thread = threading.Thread(target=lambda: flood.update(r=host.run(box.py(PRELUDE + FLOOD, "8"))))
    thread.start()
    deadline = time.monotonic() + 30
    while not (box.ws / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    other = host.run(box.request(["true"]))  # another run, and the host's own threads
    flooding = thread.is_alive()
    thread.join()
    assert other.exit_code == 0 and flooding, "the other run waited for the flood to end"
    result = flood["r"]
    assert result.exit_code == 0, result.stderr.text  # type: ignore[attr-defined]
    assert int(result.stdout.text) > 100  # type: ignore[attr-defined] - it flooded
    _unchanged(box, before)


LOOP = r"""
import os, sys, time
folder = sys.argv[1]
for i in range(2000):
    try:
        os.close(os.open(os.path.join(folder, f"f{i}"), os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError as error:
        print(i, error.strerror, flush=True)
        break
    time.sleep(0.005)
"""


def test_a_supervisor_that_dies_fails_the_command_closed(tmp_path):
    """The kernel fails every notified call with ``ENOSYS`` once the listener is closed."""
    guard = Supervisor(Rules())
    started, done = threading.Event(), threading.Event()
    spawned: dict[str, subprocess.Popen[str]] = {}

    def spawn():  # the spawning thread: no_new_privs, the filter, the command; then parked
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(38, 1, 0, 0, 0)
        guard.arm(lambda: None)
        spawned["p"] = subprocess.Popen(
            [sys.executable, "-S", "-c", LOOP, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        started.set()
        done.wait()

    thread = threading.Thread(target=spawn, daemon=True)
    thread.start()
    started.wait(10)
    deadline = time.monotonic() + 20
    while not (tmp_path / "f5").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert guard.served >= 5  # the supervisor made them
    guard.stop()
    made = len(os.listdir(tmp_path))
    out, _ = spawned["p"].communicate(timeout=20)
    done.set()
    assert "Function not implemented" in out, out
    assert len(os.listdir(tmp_path)) <= made + 1  # at most the one in flight at the stop


def test_the_result_the_record_and_doctor_say_which_guarantee_a_command_got(
    make_host, event_log, box
):
    from stockade_landlock.provider import LandlockSandbox

    from stockade.config.schema import Config, PluginsConfig
    from stockade.record.events import ResultEvent
    from stockade.request import wire

    before = _plant(box)
    off = PluginsConfig(settings={"landlock": {"supervise": False}})
    write = PRELUDE + "attempt('bashrc', write('.bashrc'))\nprint(json.dumps(out))\n"
    seen = {}
    for name, config in (
        ("on", Config(sandbox="landlock")),
        ("off", Config(sandbox="landlock", plugins=off)),
    ):
        host = make_host(allow_all=True, plugins=[event_log], config=config)
        result = host.run(box.py(write))
        seen[name] = (result, json.loads(result.stdout.text)["bashrc"])
    (held, held_out), (back, back_out) = seen["on"], seen["off"]
    assert held.sandbox.protection == "read-only" and held_out == "Read-only file system"
    assert back.sandbox.protection == "put-back" and back_out == "done"  # then put back
    assert back.restored == (str(box.ws / ".bashrc"),)
    _unchanged(box, before)
    recorded = [e.result for e in event_log.events if isinstance(e, ResultEvent)]
    assert [r.sandbox.protection for r in recorded] == ["read-only", "put-back"]
    assert '"protection": "read-only"' in json.dumps(wire.converter().unstructure(held))
    # a read-only command has no writable root to survey: nothing to say
    quiet = make_host(allow_all=True).run(box.py("pass", mode="read-only"))
    assert quiet.sandbox.protection is None
    assert "supervisor: protected paths read-only" in LandlockSandbox.probe().detail


def test_a_fifo_opened_for_writing_waits_for_its_reader_without_stalling_the_others(host, box):
    """The writer opens first and must wait (the kernel's answer), not fail with ENXIO;
    meanwhile the run's other calls are answered (the reader's own file is written)."""
    script = "mkfifo p; (sleep 0.5; echo side > side.txt; cat p) & echo hi > p; wait; cat side.txt"
    result = host.run(box.request(["sh", "-c", script]))
    assert result.exit_code == 0, result.stderr.text
    assert result.stdout.text == "hi\nside\n"


TERMINALS = r"""
master, slave = os.openpty()
os.write(slave, b"ping")
out["own"] = os.read(master, 4).decode()
out["own_name"] = os.ttyname(slave)
attempt("own_reopen", write(out["own_name"], "", flags=os.O_RDWR | os.O_NOCTTY))
for path in sys.argv[1:]:
    attempt(path + " rw", write(path, "", flags=os.O_RDWR | os.O_NOCTTY))
    attempt(path + " read", lambda: os.close(os.open(path, os.O_RDONLY | os.O_NOCTTY)))
    attempt(path + " write", write(path, "", flags=os.O_WRONLY | os.O_NOCTTY))
print(json.dumps(out))
"""


def test_its_own_pseudo_terminals_open_and_a_persons_do_not(host, box, mode):
    master, slave = os.openpty()  # a person's terminal, on the host
    try:
        theirs = os.ttyname(slave)
        result = host.run(box.py(PRELUDE + TERMINALS, theirs, mode=mode))
        assert result.exit_code == 0, result.stderr.text
        out = json.loads(result.stdout.text)
        assert out["own"] == "ping" and out["own_name"] != theirs, out
        assert out["own_reopen"] == "done", out
        for how in ("rw", "read", "write"):
            assert out[f"{theirs} {how}"] == "Permission denied", out
        os.close(os.open(theirs, os.O_RDWR | os.O_NOCTTY))  # control: the host opens it
    finally:
        os.close(master)
        os.close(slave)


UMASK = r"""
import os, stat
os.umask(0o027)
os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o666))
os.mkdir("d", 0o777)
os.mkfifo("p", 0o666)
print(json.dumps({n: oct(stat.S_IMODE(os.lstat(n).st_mode)) for n in ("f", "d", "p")}))
"""
MODES_MADE = {"f": "0o640", "d": "0o750", "p": "0o640"}


def test_what_it_makes_takes_the_commands_umask(host, box):
    result = host.run(box.py(PRELUDE + UMASK))
    assert result.exit_code == 0, result.stderr.text
    assert json.loads(result.stdout.text) == MODES_MADE


HOST_WITHOUT_UNSHARE = r"""
import ctypes, json, sys
from stockade.confine import seccomp
from stockade_landlock.loading import load_filter
assert ctypes.CDLL(None).prctl(38, 1, 0, 0, 0) == 0
load_filter(seccomp.bpf_program(network=True, unix=True, cache_dir=""))  # refuses unshare
from stockade.config.schema import Config
from stockade.host import Host
from stockade.testing import AllowAll
from stockade.request.spec import ExecRequest
ws, python, source = sys.argv[1:]
with Host(Config(sandbox="landlock"), plugins=[AllowAll()]) as host:
    result = host.run(ExecRequest([python, "-S", "-c", source], ws, mode="workspace-write"))
    print(json.dumps([result.exit_code, result.stdout.text, result.stderr.text]))
"""


def test_a_host_that_may_not_unshare_still_gives_the_commands_modes(box):
    """A host under a filter that refuses ``unshare`` (a container's): the supervisor cannot
    take a umask of its own, makes with the host's and sets each mode after."""
    python = box.py("pass").argv[0]
    run = subprocess.run(
        [sys.executable, "-c", HOST_WITHOUT_UNSHARE, str(box.ws), python, PRELUDE + UMASK],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "HOME": str(box.home)},
    )
    assert run.returncode == 0, run.stderr
    code, out, err = json.loads(run.stdout)
    assert code == 0, err
    assert json.loads(out) == MODES_MADE
