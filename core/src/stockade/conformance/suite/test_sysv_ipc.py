"""SysV IPC attacks: a host process's shared memory, message queue and semaphores.

A host process of the same user holds a canary in a SysV shared memory segment and in a
message queue, and a semaphore set other processes wait on. Without an IPC namespace of the
command's own (Landlock), each is one key or id away, and neither Landlock's rules nor its
scopes cover SysV IPC; the seccomp policy refuses the calls (:data:`stockade.confine.seccomp.
SYSV_IPC`), or an IPC namespace holds none of the host's (bubblewrap). The control runs the
same reader outside the sandbox and sees the canary.
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import subprocess
from collections.abc import Iterator

import attrs
import pytest

from stockade.confine.promises import Promise

IPC_CREAT, IPC_EXCL, IPC_RMID, IPC_STAT, IPC_NOWAIT, GETVAL = 0o1000, 0o2000, 0, 2, 0o4000, 12

# Find each object by its key and by its id, then read, take or change it.
READER = """
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
key, shm_id, msg_key, msg_id, sem_key, sem_id, size = (int(a) for a in sys.argv[1:8])
out = {}
def err():
    return os.strerror(ctypes.get_errno())
found = libc.shmget(key, 0, 0)
out["shmget"] = "ok" if found >= 0 else err()
for how, ident in (("key", found), ("id", shm_id)):
    if ident < 0:
        continue
    address = libc.shmat(ident, None, 0o10000)  # SHM_RDONLY
    if address in (None, ctypes.c_void_p(-1).value):
        out["shmat_" + how] = err()
    else:
        out["shmat_" + how] = ctypes.string_at(address, size).decode(errors="replace")
buf = ctypes.create_string_buffer(256)
out["shmctl_stat"] = "ok" if libc.shmctl(shm_id, 2, buf) >= 0 else err()
queue = libc.msgget(msg_key, 0)
out["msgget"] = "ok" if queue >= 0 else err()
message = ctypes.create_string_buffer(8 + 256)
got = libc.msgrcv(msg_id, message, 256, 0, 0o4000)  # IPC_NOWAIT
out["msgrcv"] = message.raw[8:8 + got].decode(errors="replace") if got >= 0 else err()
sems = libc.semget(sem_key, 0, 0)
out["semget"] = "ok" if sems >= 0 else err()
value = libc.semctl(sem_id, 0, 12)  # GETVAL
out["semctl_getval"] = str(value) if value >= 0 else err()
class Sembuf(ctypes.Structure):
    _fields_ = (("num", ctypes.c_ushort), ("op", ctypes.c_short), ("flg", ctypes.c_short))
take = Sembuf(0, -1, 0o4000)  # take the host's token, without waiting
out["semop"] = "ok" if libc.semop(sem_id, ctypes.byref(take), 1) >= 0 else err()
print(json.dumps(out))
"""


@attrs.frozen
class Held:
    """The host's SysV objects and the canary they hold."""

    canary: str
    shm_key: int
    shm_id: int
    msg_key: int
    msg_id: int
    sem_key: int
    sem_id: int

    def args(self) -> list[str]:
        """The reader's arguments."""
        ids = (self.shm_key, self.shm_id, self.msg_key, self.msg_id, self.sem_key, self.sem_id)
        return [*(str(i) for i in ids), str(len(self.canary))]


class _Message(ctypes.Structure):
    _fields_ = (("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 256))


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    return libc


def _check(rc: int, what: str) -> int:
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return rc


def queued(held: Held) -> int:
    """How many messages the host's queue still holds."""
    buf = ctypes.create_string_buffer(256)
    _check(_libc().msgctl(held.msg_id, IPC_STAT, buf), "msgctl")
    # struct msqid_ds on x86_64: ipc_perm (48), 3 times (24), __msg_cbytes (8), msg_qnum.
    return int.from_bytes(buf.raw[80:88], "little")


def semaphore(held: Held) -> int:
    """The host's semaphore's value (1 until someone takes it)."""
    return _check(_libc().semctl(held.sem_id, 0, GETVAL), "semctl")


@pytest.fixture
def held() -> Iterator[Held]:
    """A shared memory segment and a message queue holding a canary, and a semaphore at 1,
    made by this (host) process with the user's usual mode (0600)."""
    libc = _libc()
    canary = "CANARY-" + secrets.token_hex(8)
    key = secrets.randbelow(1 << 30) + 1
    shm = _check(libc.shmget(key, 4096, IPC_CREAT | IPC_EXCL | 0o600), "shmget")
    msg = sem = -1
    try:
        address = libc.shmat(shm, None, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            _check(-1, "shmat")
        ctypes.memmove(address, canary.encode(), len(canary))
        libc.shmdt(ctypes.c_void_p(address))
        msg = _check(libc.msgget(key + 1, IPC_CREAT | IPC_EXCL | 0o600), "msgget")
        message = _Message(1, canary.encode())
        _check(libc.msgsnd(msg, ctypes.byref(message), len(canary), IPC_NOWAIT), "msgsnd")
        sem = _check(libc.semget(key + 2, 1, IPC_CREAT | IPC_EXCL | 0o600), "semget")
        _check(libc.semctl(sem, 0, 16, 1), "semctl SETVAL")  # SETVAL
        yield Held(canary, key, shm, key + 1, msg, key + 2, sem)
    finally:
        libc.shmctl(shm, IPC_RMID, None)
        if msg >= 0:
            libc.msgctl(msg, IPC_RMID, None)
        if sem >= 0:
            libc.semctl(sem, 0, IPC_RMID)


@pytest.mark.promise(Promise.PROCESS_ISOLATION)
def test_host_sysv_ipc_is_out_of_reach(host, box, held, mode):
    result = host.run(box.py(READER, *held.args(), mode=mode))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    assert held.canary not in result.stdout.text, out
    assert queued(held) == 1, "the command took the host's message"
    assert semaphore(held) == 1, "the command took the host's semaphore"
    for call in ("shmget", "msgget", "semget", "shmctl_stat", "semctl_getval", "semop"):
        assert out[call] != "ok", (call, out)
    # Control: the same reader outside the sandbox reads the segment and takes the message.
    python = box.py("pass").argv[0]
    plain = subprocess.run(
        [python, "-S", "-c", READER, *held.args()], capture_output=True, text=True, check=True
    )
    control = json.loads(plain.stdout)
    assert control["shmat_key"] == control["shmat_id"] == held.canary, control
    assert control["msgrcv"] == held.canary, control
    assert control["semop"] == "ok", control
