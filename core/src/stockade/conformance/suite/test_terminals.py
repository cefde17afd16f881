"""Terminal attacks: a person's terminal, opened from inside to read their keystrokes or
write to their screen.

The host (this test) opens a pseudo-terminal, as a person's shell has one; the command is
given its path (``/dev/pts/N``) and opens it for reading, for writing and both. Each must
fail: bubblewrap's ``/dev`` has a ``devpts`` of its own, where the host's terminals do not
exist; Landlock's supervisor opens only the terminals the command made. The control: the
same path opens on the host.
"""

from __future__ import annotations

import json
import os

import pytest

from stockade.confine.promises import Promise

OPEN_TERMINAL = """
import json, os, sys
out = {}
for name, flags in (("rw", os.O_RDWR), ("read", os.O_RDONLY), ("write", os.O_WRONLY)):
    try:
        os.close(os.open(sys.argv[1], flags | os.O_NOCTTY))
        out[name] = "opened"
    except OSError as error:
        out[name] = error.strerror
print(json.dumps(out))
"""


@pytest.mark.promise(Promise.NO_TERMINAL_INJECTION)
def test_a_persons_terminal_cannot_be_opened(host, box, mode):
    master, slave = os.openpty()
    try:
        theirs = os.ttyname(slave)
        result = host.run(box.py(OPEN_TERMINAL, theirs, mode=mode))
        assert result.exit_code == 0, result.stderr.text
        out = json.loads(result.stdout.text)
        assert "opened" not in out.values(), out
        os.close(os.open(theirs, os.O_RDWR | os.O_NOCTTY))  # control: it opens out here
    finally:
        os.close(master)
        os.close(slave)
