"""Wrappers are seen through as each one reads its options (docs/policy.md, "Programs that
run programs", the wrappers' table: one test per row), and the class of what they run never
depends on how those options are spelled."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.policy.classifier import classify_argv
from stockade.policy.wrappers import WRAPPERS

# One row per wrapper: options that take a value, spelled every way, then ``rm``; the value
# is a program's name, so a wrapper read wrongly would class that program instead.
ROWS = [
    ("env", ["-u", "cat", "-C", "/tmp", "--unset=ls", "--chdir", "cat", "-iu", "cat", "A=1"]),
    ("env", ["-0v", "--block-signal", "--default-signal=INT", "--ignore-env", "-", "A=1"]),
    ("exec", ["-a", "cat"]),
    ("exec", ["-cla", "cat"]),
    ("nice", ["-n", "cat"]),
    ("nice", ["-ncat"]),
    ("nice", ["--adjustment", "cat"]),
    ("nice", ["--adj=5"]),
    ("nice", ["-5"]),
    ("nice", ["--5"]),
    ("nohup", ["--"]),
    ("timeout", ["-s", "cat", "-k", "cat", "5"]),
    ("timeout", ["--signal", "cat", "--kill-after=1", "--foreground", "--preserve", "-v", "5"]),
    ("timeout", ["--sig", "cat", "-vs", "cat", "5"]),
    ("stdbuf", ["-o", "cat", "-eL", "--input", "cat", "--err=0"]),
    ("setsid", ["-cfw", "--fork", "--wait"]),
    ("ionice", ["-c", "cat", "-n", "cat", "--class", "cat", "--classdata=7", "-t"]),
    ("chrt", ["-T", "cat", "--sched-period", "cat", "-P5", "-f", "10"]),
    ("chrt", ["--rr", "--reset-on-fork", "-v", "10"]),
    ("taskset", ["-c", "0"]),
    ("taskset", ["--cpu-list", "--all-tasks", "0-3"]),
    ("xargs", ["-a", "cat", "-I", "cat", "-n", "cat", "--arg-file", "cat", "-0rt"]),
    ("xargs", ["--max-procs", "cat", "--process-slot-var", "cat", "-i{}", "-e", "--eof=x"]),
    ("time", ["-o", "cat", "-f", "cat", "--format", "cat", "--output=x", "-p"]),
    ("sudo", ["-u", "cat", "--user", "cat", "-g", "cat", "-E"]),
    ("doas", ["-u", "cat", "-n"]),
    ("command", ["-p"]),
    ("unbuffer", ["-p"]),
    ("busybox", []),
]


@pytest.mark.parametrize(
    ("wrapper", "options"), ROWS, ids=[" ".join([w, *o])[:40] for w, o in ROWS]
)
def test_each_wrapper_runs_what_follows_its_options(wrapper: str, options: list[str]) -> None:
    kind, why = classify_argv([wrapper, *options, "rm", "-rf", "x"])
    assert (kind, why) == ("destroys", f"rm is listed as destroys (through {wrapper})")
    control = classify_argv([wrapper, *options, "cat", "x"])[0]
    assert control == "reads"  # the same options before a reader: read as the reader


@pytest.mark.parametrize(
    "argv",
    [
        ["env", "-S", "rm -rf x"],
        ["env", "-u", "X", "-S", "rm -rf x"],
        ["env", "-iS", "rm -rf x"],
        ["env", "-S'rm -rf x'"],
        ["env", "--split-string=rm -rf x"],
        ["env", "--split", "rm -rf x"],
        ["env", "--sp=rm -rf x"],
    ],
)
def test_env_splitting_a_string_is_destroys_however_it_is_spelled(argv: list[str]) -> None:
    kind, why = classify_argv(argv)
    assert kind == "destroys" and "makes a command of a string" in why, why


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
def test_an_option_a_wrapper_does_not_know_is_destroys(wrapper: str) -> None:
    """What an unknown option takes cannot be told: the wrapper is not read past it."""
    for unknown in ("--no-such-option", "-%"):
        kind, why = classify_argv([wrapper, unknown, "cat", "x"])
        assert kind == "destroys" and "not an option stockade knows" in why, (unknown, why)


def _spelled(wrapper: str) -> st.SearchStrategy[list[str]]:
    """Options of ``wrapper`` from its table, in any spelling getopt takes."""
    spec = WRAPPERS[wrapper]
    value = st.sampled_from(["cat", "ls", "5", "x=y"])
    longs = [n for n in spec.long_names() if n not in ("help", "version")]
    words: list[st.SearchStrategy[list[str]]] = []
    if spec.takes:
        letter = st.sampled_from([c for c in spec.takes if f"-{c}" not in spec.unseen])
        words += [st.tuples(letter, value).map(lambda t: [f"-{t[0]}", t[1]])]
        words += [st.tuples(letter, value).map(lambda t: [f"-{t[0]}{t[1]}"])]
    if spec.flags:
        flags = st.text(st.sampled_from(spec.flags), min_size=1, max_size=3)
        words += [flags.map(lambda f: [f"-{f}"])]
    for name in longs:
        if f"--{name}" in spec.unseen:
            continue
        cut = st.integers(1, len(name)).map(lambda n, name=name: name[:n])
        every = spec.long_names()  # a cut getopt takes: exact, or one name's alone
        cut = cut.filter(
            lambda c, every=every: (
                c in every or sum(map(str.startswith, every, [c] * len(every))) == 1
            )
        )
        if name in spec.long_takes.split():
            words += [st.tuples(cut, value).map(lambda t: [f"--{t[0]}", t[1]])]
            words += [st.tuples(cut, value).map(lambda t: [f"--{t[0]}={t[1]}"])]
        else:
            words += [cut.map(lambda c: [f"--{c}"])]
    if not words:
        return st.just([])
    return st.lists(st.one_of(words), max_size=4).map(lambda ws: [w for pair in ws for w in pair])


@settings(max_examples=200, deadline=None)
@given(data=st.data(), wrapper=st.sampled_from(sorted(set(WRAPPERS) - {"command"})))
def test_the_class_never_depends_on_how_a_wrapper_s_options_are_spelled(data, wrapper) -> None:
    options = data.draw(_spelled(wrapper))
    own = ["1"] * WRAPPERS[wrapper].positional
    assert classify_argv([wrapper, *options, *own, "rm", "x"])[0] == "destroys", options
    assert classify_argv([wrapper, *options, *own, "cat", "x"])[0] == "reads", options
