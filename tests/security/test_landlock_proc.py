"""Other processes' ``/proc`` entries under Landlock's supervisor: the control without it (the
same attack reads a host process's command line), a thread racing a read-only path against
the check, and what a listing of ``/proc`` still shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from stockade_landlock import supervisor

from stockade.config.schema import Config, PluginsConfig
from stockade.conformance.suite.test_processes import READ_OTHERS

pytestmark = [
    pytest.mark.sandboxes("landlock"),
    pytest.mark.skipif(supervisor.unavailable() is not None, reason="no supervisor here"),
]


@pytest.fixture
def victim(box):
    """A host process with the canary on its command line."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", box.canary])
    yield proc
    proc.kill()
    proc.wait()


def test_without_the_supervisor_the_same_attack_reads_the_host(make_host, box, victim):
    """The control of the kit's attack: with ``supervise = false`` it sees the breach."""
    off = PluginsConfig(settings={"landlock": {"supervise": False}})
    host = make_host(allow_all=True, config=Config(sandbox="landlock", plugins=off))
    result = host.run(box.py(READ_OTHERS, str(victim.pid), str(os.getpid())))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    assert box.canary in out["victim:cmdline"]
    assert "Tgid" in out["host:status"]


RACE = r"""
import json, os, sys, threading, ctypes
victim = int(sys.argv[1])
plain = b"/etc/hostname\0".ljust(64, b"\0")
other = f"/proc/{victim}/cmdline\0".encode().ljust(64, b"\0")
buf = ctypes.create_string_buffer(plain, 64)
stop = False
def flip():
    while not stop:
        ctypes.memmove(buf, other, 64)
        ctypes.memmove(buf, plain, 64)
threading.Thread(target=flip, daemon=True).start()
libc = ctypes.CDLL(None, use_errno=True)
seen = {"opened": 0, "refused": 0, "leaked": 0}
for _ in range(3000):
    fd = libc.open(buf, os.O_RDONLY | os.O_CLOEXEC)
    if fd < 0:
        seen["refused"] += 1
        continue
    data = os.read(fd, 4096)
    os.close(fd)
    seen["leaked" if b"sleep" in data else "opened"] += 1
stop = True
print(json.dumps(seen))
"""


def test_a_racing_thread_cannot_swap_a_read_for_another_process_entry(host, box, victim):
    """A read-only open the kernel makes itself (its path not under ``/proc``) while a
    second thread swaps the path for another process's entry: the command's own Landlock
    layer refuses what the supervisor never saw."""
    result = host.run(box.py(RACE, str(victim.pid)))
    assert result.exit_code == 0, result.stderr.text
    seen = json.loads(result.stdout.text)
    assert seen["leaked"] == 0, seen
    assert seen["opened"] > 0, seen  # control: the plain path opens
    assert seen["refused"] > 0, seen  # the swap did land, and was refused


LISTING = r"""
import json, os, sys
victim = int(sys.argv[1])
out = {"listed": victim in [int(n) for n in os.listdir("/proc") if n.isdigit()]}
out["stat"] = os.stat(f"/proc/{victim}").st_uid == os.getuid()
for name in ("cmdline", "stat", "task"):
    try:
        path = f"/proc/{victim}/{name}"
        os.listdir(path) if name == "task" else open(path).read()
        out[name] = "read"
    except OSError as error:
        out[name] = error.strerror
print(json.dumps(out))
"""


def test_a_listing_still_names_other_processes_but_opens_nothing(host, box, victim):
    """What ``getdents`` and ``stat`` still show (the pinned ``pid-namespace`` gap): the
    number and owner; nothing in the folder opens."""
    result = host.run(box.py(LISTING, str(victim.pid)))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    assert out["listed"] and out["stat"]
    assert out["cmdline"] == out["stat"] == out["task"] == "Permission denied", out


NOT_DUMPABLE = r"""
import ctypes, json
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: its memory cannot be read
out = {}
for name, path, mode in (("read", "/etc/hostname", "r"), ("proc", "/proc/self/status", "r"),
                         ("write", "new.txt", "w")):
    try:
        open(path, mode).close()
        out[name] = "done"
    except OSError as error:
        out[name] = error.strerror
print(json.dumps(out))
"""


def test_a_command_that_is_not_dumpable_still_reads(host, box):
    """Its memory cannot be read, so the supervisor cannot see a path: a plain read goes
    to the kernel all the same (its own Landlock domain judges it), while what needs the
    path (a write, an open under ``/proc``) fails closed."""
    result = host.run(box.py(NOT_DUMPABLE))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    assert out["read"] == "done", out
    assert out["proc"] != "done" and out["write"] != "done", out
    assert not (box.ws / "new.txt").exists()
