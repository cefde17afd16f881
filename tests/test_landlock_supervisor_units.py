"""The Landlock supervisor's pure parts, fuzzed: the path split and its filter's layout."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st
from stockade_landlock.supervisor import bpf
from stockade_landlock.supervisor.resolve import signed, split
from stockade_landlock.supervisor.rules import Rules

PATHS = st.binary(min_size=1, max_size=64).filter(lambda b: b"\0" not in b)


@given(PATHS)
def test_split_keeps_every_byte_and_leaves_one_name(path):
    head, last = split(path)
    if path.strip(b"/"):
        assert (last if head == b"." else head + last) == path  # nothing lost or added
        assert head == b"." or head.endswith(b"/")
        assert b"/" not in last.rstrip(b"/")  # one name, with its trailing slashes
        assert last.rstrip(b"/")
    else:
        assert (head, last) == (b"/", b".")


@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_a_register_reads_as_the_kernel_reads_an_int(value):
    got = signed(value)
    assert -(1 << 31) <= got < 1 << 31
    assert got & 0xFFFFFFFF == value & 0xFFFFFFFF


def _run(program: bytes, nr: int, args: tuple[int, ...] = (0,) * 6) -> int:
    """A tiny interpreter for the instructions the filter uses (ld abs, jeq, jset, ret)."""
    data = struct.pack("<iIQ6Q", nr, bpf.AUDIT_ARCH_X86_64, 0, *args)
    insns = [struct.unpack("<HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code == 0x15:
            pc += 1 + (jt if acc == k else jf)
        elif code == 0x45:
            pc += 1 + (jt if acc & k else jf)
        else:
            assert code == 0x06
            return k


@given(st.integers(min_value=0, max_value=0xFFFFFFFF))
def test_open_notifies_whatever_its_flags(flags):
    """A read is notified too: another process's /proc entry is opened for reading."""
    program = bpf.program()
    for nr, arg in bpf.OPENS.values():
        args = [0] * 6
        args[arg] = flags
        assert _run(program, nr, tuple(args)) == bpf.RET_USER_NOTIF


def test_each_notified_call_is_notified_and_others_pass():
    program = bpf.program()
    for nr in bpf.NOTIFIED.values():
        assert _run(program, nr) == bpf.RET_USER_NOTIF
    for nr in (0, 1, 3, 4, 59, 217, 262):  # read, write, close, stat, execve, getdents64...
        assert _run(program, nr) == bpf.RET_ALLOW


@given(st.lists(st.sampled_from(["a", "b", ".git", "c", ".bashrc"]), min_size=1, max_size=5))
def test_rules_refuse_exactly_what_lies_at_or_beneath_a_kept_path(names):
    rules = Rules(("/w/.git", "/w/.bashrc"))
    path = "/w/" + "/".join(names)
    assert rules.refuses(path) == (names[0] in (".git", ".bashrc"))
    assert rules.holds("/w") and rules.holds(path) == rules.refuses(path)
