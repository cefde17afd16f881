"""The caller's terminal and session: a command cannot take the person's terminal to read
what they type, nor write to it.

A host runs in a process whose controlling terminal is a pseudo-terminal the kit holds (the
person's terminal). The command opens ``/dev/tty``, makes itself the terminal's foreground
group (ignoring ``SIGTTOU``, as any program may), says it is ready on the terminal, and
reads a line. When the kit sees it ready it types a canary line. The control: the same
command run unconfined (``danger-full-access``) reads the line.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

import pytest

from stockade.confine.promises import Promise
from stockade.conformance.ground import PYTHON

# The host, in the kit's terminal: runs one command, prints its result.
HOST = """
import fcntl, json, os, sys, termios
fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # a session leader already: the terminal becomes its own
from stockade.config.schema import Config
from stockade.host import Host
from stockade.request.spec import ExecRequest
from stockade.testing import AllowAll
sandbox, mode, cwd, home, *argv = sys.argv[1:]
host = Host(Config(sandbox=sandbox), plugins=[AllowAll()])
try:
    request = ExecRequest(argv, cwd, mode=mode, sandbox=sandbox, env={"HOME": home}, timeout=60)
    result = host.run(request)
    print("RESULT", json.dumps([result.exit_code, result.stdout.text, result.stderr.text]))
finally:
    host.close()
"""

# The command: take the terminal, say so, read what is typed.
TAKE = """
import os, select, signal
signal.signal(signal.SIGTTOU, signal.SIG_IGN)
signal.signal(signal.SIGTTIN, signal.SIG_IGN)
try:
    fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
except OSError as error:
    print("open refused", error.errno)
    raise SystemExit(0)
try:
    os.tcsetpgrp(fd, os.getpgrp())
except OSError as error:
    print("foreground refused", error.errno)
try:
    os.write(fd, b"KIT-READY\\n")
except OSError as error:
    print("write refused", error.errno)
ready, _, _ = select.select([fd], [], [], 15)
try:
    print("read", os.read(fd, 512).decode(errors="replace") if ready else "nothing")
except OSError as error:
    print("read refused", error.errno)
"""


def _in_terminal(box, sandbox: str, mode: str, typed: str) -> tuple[str, list[object]]:
    """Run ``TAKE`` from a host whose terminal the kit holds; type ``typed`` once the
    command says it is ready. What the terminal showed, and the result."""
    argv = [sys.executable, "-c", HOST, sandbox, mode, str(box.ws), str(box.home)]
    argv += [PYTHON, "-S", "-c", TAKE]
    master, slave = os.openpty()
    child = subprocess.Popen(  # a session of its own, the pseudo-terminal its terminal
        argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
    )
    os.close(slave)
    shown = b""
    typed_yet = False
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child is gone, and so is the terminal's other side
                break
            if not chunk:
                break
            shown += chunk
            if not typed_yet and b"KIT-READY" in shown:
                os.write(master, typed.encode() + b"\n")
                typed_yet = True
    finally:
        os.close(master)
        try:
            status = child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            status = child.wait()
    text = shown.decode(errors="replace")
    lines = [line for line in text.splitlines() if line.startswith("RESULT ")]
    assert lines, (status, text)
    return text, json.loads(lines[-1].removeprefix("RESULT "))


@pytest.mark.promise(Promise.CALLER_SESSION)
def test_the_command_cannot_read_what_the_person_types(box, mode):
    typed = box.canary + "-typed"
    text, (code, stdout, stderr) = _in_terminal(box, box.sandbox, mode, typed)
    assert code == 0, (stdout, stderr)
    assert typed not in str(stdout), stdout
    assert "KIT-READY" not in text.split("RESULT ", 1)[0], "the command wrote to the terminal"
    assert stdout.startswith("open refused"), stdout  # no terminal at all: not even its own


@pytest.mark.promise(Promise.CALLER_SESSION)
def test_unconfined_the_same_command_reads_what_is_typed(box):
    """The control: outside any sandbox the attack works, so the kit would see a breach."""
    typed = box.canary + "-typed"
    _text, (code, stdout, stderr) = _in_terminal(box, "none", "danger-full-access", typed)
    assert code == 0, (stdout, stderr)
    assert typed in str(stdout), stdout
