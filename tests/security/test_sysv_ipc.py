"""The kit's SysV IPC attacks of :mod:`stockade.conformance.suite.test_sysv_ipc`, on both
providers, and the filter's SysV rules as each provider compiles them."""

from __future__ import annotations

import json

from stockade.confine import seccomp
from stockade.conformance.suite.test_syscalls import RAW
from stockade.conformance.suite.test_sysv_ipc import *  # noqa: F403

# x86_64 numbers of the SysV calls (ipc() does not exist there).
SYSV_NUMBERS = {
    "shmget": 29, "shmat": 30, "shmctl": 31, "semget": 64, "semop": 65, "semctl": 66,
    "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "semtimedop": 220,
}  # fmt: skip


def test_every_sysv_call_is_attacked():
    assert set(seccomp.SYSV_IPC) == {*SYSV_NUMBERS, "ipc"}


def test_each_sysv_call_is_refused_under_landlock_only(host, box, sandbox):
    # Arguments that fail in the kernel (bad ids, null pointers) when the filter lets them by.
    calls = [(name, nr, [-1, 0, 0, 0, 0]) for name, nr in SYSV_NUMBERS.items()]
    result = host.run(box.py(RAW, json.dumps(calls)))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    for name in SYSV_NUMBERS:
        if sandbox == "landlock":
            assert out[name] == "Operation not permitted", (name, out[name])
        else:  # bubblewrap's IPC namespace holds: the kernel judges the call
            assert out[name] != "Operation not permitted", (name, out[name])
