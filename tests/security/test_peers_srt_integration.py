"""sandbox-runtime's ``integration.test.ts``: files, commands, shells and process bounds.

The peer wraps a shell string; Stockade runs argv and never adds a shell: a case about a
shell names one (``sh -c``), which the built-in classifier classes ``destroys`` (a person is
asked, unless the policy allows). The network cases are in ``test_peers_srt_net.py``. Our own
tests of the same cases, not their code; each names the peer test it ports.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import procs
from stockade.errors import PolicyHeld, ProgramNotFound

from .peers_common import SRT_INTEGRATION

ARGV = "differs: argv, never a shell string; a -c script is read by its parts; one not read asks"
NO_SHELL_PICK = (
    "differs: no binShell: the shell is argv[0] (zsh is not on the test machine; "
    "the same shape runs with sh)"
)
LANDLOCK_TEXT = "differs: refused with Permission denied, not Read-only file system"
PEERS = {
    "test_blocks_writes_outside_cwd": (
        SRT_INTEGRATION,
        "should block writes outside current working directory",
        "pass",
        "pass",
    ),
    "test_allows_writes_within_cwd": (
        SRT_INTEGRATION,
        "should allow writes within current working directory",
        "pass",
        "pass",
    ),
    "test_allows_reads_from_anywhere": (
        SRT_INTEGRATION,
        "should allow reads from anywhere",
        "pass",
        "pass",
    ),
    "test_allows_writes_without_network_rules": (
        SRT_INTEGRATION,
        "should allow writes in seccomp-only mode (no network restrictions)",
        "pass",
        "pass",
    ),
    "test_executes_basic_commands": (
        SRT_INTEGRATION,
        "should execute basic commands successfully",
        "pass",
        "pass",
    ),
    "test_complex_pipelines": (
        SRT_INTEGRATION,
        "should handle complex command pipelines",
        ARGV,
        ARGV,
    ),
    "test_shell_named_in_argv": (
        SRT_INTEGRATION,
        "should execute commands with zsh when binShell is specified",
        NO_SHELL_PICK,
        NO_SHELL_PICK,
    ),
    "test_shell_syntax_of_the_named_shell": (
        SRT_INTEGRATION,
        "should use zsh syntax successfully with binShell=zsh",
        NO_SHELL_PICK,
        NO_SHELL_PICK,
    ),
    "test_no_default_shell": (
        SRT_INTEGRATION,
        "should default to bash when binShell is not specified",
        "differs: no default shell: a string is a program name (ProgramNotFound)",
        "differs: no default shell: a string is a program name (ProgramNotFound)",
    ),
    "test_pid_namespace_hides_host_pids": (
        SRT_INTEGRATION,
        "should isolate PID namespace - sandboxed processes cannot see host PIDs",
        "pass",
        "gap: no PID namespace under Landlock: host PIDs are listed (nothing in them opens)",
    ),
    "test_symlink_escape_is_refused": (
        SRT_INTEGRATION,
        "should prevent symlink-based filesystem escape attempts",
        "pass",
        LANDLOCK_TEXT,
    ),
    "test_background_processes_end_with_the_command": (
        SRT_INTEGRATION,
        "should terminate background processes when sandbox exits",
        "pass",
        "pass",
    ),
    "test_children_die_when_stockade_is_terminated": (
        SRT_INTEGRATION,
        "should kill child processes when sandbox is terminated via SIGTERM (--die-with-parent)",
        "pass",
        "pass",
    ),
    "test_no_orphans_after_a_timeout": (
        SRT_INTEGRATION,
        "should not leave orphan processes after timeout kills sandbox",
        "pass",
        "pass",
    ),
    "test_privilege_escalation_is_refused": (
        SRT_INTEGRATION,
        "should prevent privilege escalation attempts",
        "pass",
        "pass",
    ),
    "test_special_file_types": (
        SRT_INTEGRATION,
        "should prevent creation of special file types that could bypass restrictions",
        "pass",
        "pass",
    ),
}


def _ok(result):
    assert result.exit_code == 0, result.stdout.text + result.stderr.text
    return result


# should block writes outside current working directory (control: the same write inside)
def test_blocks_writes_outside_cwd(host, box):
    target = box.outside / "outside.txt"
    result = host.run(box.request(["sh", "-c", f"echo x > {target}"]))
    assert result.exit_code != 0 and not target.exists()
    assert box.write_refused in result.stderr.text
    _ok(host.run(box.request(["sh", "-c", "echo x > inside.txt"])))


# should allow writes within current working directory
def test_allows_writes_within_cwd(host, box):
    _ok(host.run(box.request(["sh", "-c", "mkdir -p sub && echo hello > sub/f.txt"])))
    assert (box.ws / "sub" / "f.txt").read_text() == "hello\n"


# should allow reads from anywhere (~/.bashrc and a file outside the workspace); the
# credential stores are the documented exception (control: ~/.ssh stays unreadable)
def test_allows_reads_from_anywhere(host, box):
    (box.home / ".bashrc").write_text("# rc\n")
    (box.home / ".ssh").mkdir()
    (box.home / ".ssh" / "id_ed25519").write_text(box.canary)
    read = _ok(
        host.run(box.request(["head", "-n", "5", str(box.home / ".bashrc"), str(box.secret)]))
    )
    assert "# rc" in read.stdout.text and box.canary in read.stdout.text
    masked = host.run(box.request(["cat", str(box.home / ".ssh" / "id_ed25519")]))
    assert box.canary not in masked.stdout.text


# should allow writes in seccomp-only mode (no network restrictions): Stockade has no such
# mode of its own; a plain workspace-write run (no network, seccomp on) is the nearest
def test_allows_writes_without_network_rules(host, box):
    _ok(host.run(box.request(["sh", "-c", "echo written > seccomp-only.txt"])))
    assert (box.ws / "seccomp-only.txt").read_text() == "written\n"


# should execute basic commands successfully
def test_executes_basic_commands(host, box):
    result = _ok(host.run(box.request(["echo", "Hello from sandbox"])))
    assert result.stdout.text == "Hello from sandbox\n"


# should handle complex command pipelines: a pipeline of plain commands is read by its parts
# (reads: it runs with the workspace read-only); one with an expansion is held for a person
def test_complex_pipelines(make_host, host, box):
    argv = ["sh", "-c", 'printf "line1\\nline2\\nline3\\n" | grep line2']
    strict = make_host(config=host.config)
    result = _ok(strict.run(box.request(argv)))
    assert result.stdout.text == "line2\n" and result.classification.kind == "reads"
    assert result.sandbox.mode == "read-only"
    with pytest.raises(PolicyHeld):
        strict.run(box.request(["sh", "-c", 'printf "$0" | grep line2']))


# should execute commands with zsh when binShell is specified
def test_shell_named_in_argv(host, box):
    result = _ok(host.run(box.request(["/bin/sh", "-c", 'echo "Shell: $0"'])))
    assert result.stdout.text == "Shell: /bin/sh\n"


# should use zsh syntax successfully with binShell=zsh (bash syntax, in the shell named)
def test_shell_syntax_of_the_named_shell(host, box):
    result = _ok(host.run(box.request(["bash", "-c", "a=(x y z); echo ${#a[@]} ${a[1]}"])))
    assert result.stdout.text == "3 y\n"


# should default to bash when binShell is not specified: no shell reads the string
def test_no_default_shell(host, box):
    with pytest.raises(ProgramNotFound):
        host.run(box.request(['echo "Shell: $BASH_VERSION"']))
    assert _ok(host.run(box.request(["echo", "$BASH_VERSION"]))).stdout.text == "$BASH_VERSION\n"


COUNT_PIDS = "import os; print(sum(n.isdigit() for n in os.listdir('/proc')))"


# should isolate PID namespace - sandboxed processes cannot see host PIDs
@pytest.mark.gap("landlock", "no PID namespace: host PIDs are listed (nothing in them opens)")
def test_pid_namespace_hides_host_pids(host, box):
    on_host = sum(n.isdigit() for n in os.listdir("/proc"))
    assert on_host > 10  # control: the host has processes to hide
    inside = int(_ok(host.run(box.py(COUNT_PIDS))).stdout.text)
    assert inside < 10, inside


# should prevent symlink-based filesystem escape attempts
def test_symlink_escape_is_refused(host, box):
    target = box.outside / "escape-test.txt"
    link = box.ws / "escape-link-write"
    result = host.run(box.request(["sh", "-c", f"ln -s {target} {link} && echo escaped > {link}"]))
    assert result.exit_code != 0 and not target.exists()
    assert box.write_refused in result.stderr.text
    assert link.is_symlink()  # the link itself was made: only the write through it failed


def _marker() -> str:
    return f"{os.getpid() % 1000}.{time.monotonic_ns() % 100000}3"


# should terminate background processes when sandbox exits
def test_background_processes_end_with_the_command(host, box):
    marker = _marker()
    loop = f"(while true; do echo alive >> marker.txt; sleep {marker}; done) & sleep 0.5"
    _ok(host.run(box.request(["sh", "-c", loop])))
    assert (box.ws / "marker.txt").read_text().startswith("alive")  # control: it ran
    assert procs.wait_until(lambda: not procs.sleeping(marker), timeout=30), procs.sleeping(marker)


# should kill child processes when sandbox is terminated via SIGTERM (--die-with-parent):
# `stockade run` itself gets SIGTERM while its command's child sleeps
def test_children_die_when_stockade_is_terminated(box):
    marker = _marker()
    argv = [sys.executable, "-c", "from stockade.cli import entry; entry()", "run"]
    argv += ["--sandbox", box.sandbox, "--yes"]
    argv += ["--", "sh", "-c", f"sleep {marker} & sleep {marker}; echo finished"]
    env = {**os.environ, "HOME": str(box.home)}
    runner = subprocess.Popen(
        argv, cwd=box.ws, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        started = procs.wait_until(lambda: len(procs.sleeping(marker)) == 2, timeout=30)
        assert started, runner.poll() or runner.stderr
        runner.send_signal(signal.SIGTERM)
        out, _err = runner.communicate(timeout=30)
        assert b"finished" not in out
        assert procs.wait_until(lambda: not procs.sleeping(marker), timeout=30), procs.sleeping(
            marker
        )
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()


# should not leave orphan processes after timeout kills sandbox
def test_no_orphans_after_a_timeout(host, box):
    marker = _marker()
    request = box.request(
        ["sh", "-c", f"setsid sleep {marker} & nohup sleep {marker} & sleep {marker}"]
    )
    result = host.run(
        type(request)(request.argv, request.cwd, env=request.env, sandbox=box.sandbox, timeout=1)
    )
    assert result.timed_out
    assert procs.wait_until(lambda: not procs.sleeping(marker), timeout=30), procs.sleeping(marker)


SU = ["su", "-s", "/bin/sh", "-c", "id -u", "nobody"]
ESCALATE = f"""
SU = {SU!r}
import os, shutil, subprocess
shutil.copy("/usr/bin/id", "id-suid")
try:
    os.chmod("id-suid", 0o4755)
    print(os.stat("id-suid").st_mode & 0o4000 != 0)
except PermissionError:  # refused outright where the writes are direct (no-setid)
    print(True)
ran = subprocess.run(["./id-suid", "-u"], capture_output=True, text=True)
print(ran.stdout.strip() == str(os.getuid()))
status = dict(l.split(":", 1) for l in open("/proc/self/status"))
print(status["CapEff"].strip(), status["NoNewPrivs"].strip())
su = subprocess.run(SU, capture_output=True, text=True)
print(su.returncode != 0)
"""


# should prevent privilege escalation attempts: a setuid copy runs as the caller (or its bit
# is refused), no capabilities even as root, no_new_privs set, and su cannot switch user
def test_privilege_escalation_is_refused(host, box):
    if os.getuid() == 0:  # control: as root outside the sandbox, su does switch user
        host_su = subprocess.run(SU, check=False, capture_output=True, text=True)
        assert host_su.stdout == "65534\n"
    result = _ok(host.run(box.py(ESCALATE)))
    assert result.stdout.text.split("\n")[:4] == ["True", "True", "0000000000000000 1", "True"], (
        result.stdout.text + result.stderr.text
    )


SPECIAL = """
import os, sys
def attempt(name, fn):
    try:
        fn(); print(name, "done")
    except OSError as e:
        print(name, e.strerror)
attempt("fifo", lambda: os.mkfifo("test.fifo"))
attempt("hardlink", lambda: os.link("/etc/passwd", "hardlink.txt"))
attempt("mknod", lambda: os.mknod("fake-device", 0o600 | 0o020000, os.makedev(1, 3)))
"""


# should prevent creation of special file types that could bypass restrictions
def test_special_file_types(host, box):
    lines = _ok(host.run(box.py(SPECIAL))).stdout.text.splitlines()
    assert lines[0] == "fifo done" and (box.ws / "test.fifo").exists()  # the control
    assert lines[1] != "hardlink done" and not (box.ws / "hardlink.txt").exists()
    assert lines[2] == "mknod Operation not permitted" and not (box.ws / "fake-device").exists()
