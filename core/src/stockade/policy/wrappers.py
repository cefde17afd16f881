"""Wrappers: programs that run the program after their own options (``env``, ``nice``,
``timeout``, ``xargs``, ...), and how to find that program the way each one does.

Each wrapper's options are read as its own ``getopt_long`` reads them, stopping at the first
word that is not an option (every one of them does): a short option that takes a value
takes the rest of its word or the next word (``-n5``, ``-n 5``, ``-in 5``), a long one the
part after ``=`` or the next word, and a long option may be cut to any unambiguous prefix
(``--sig=KILL``, ``--split``). An option the table does not know, or a cut that is
ambiguous, leaves the wrapper unread: :func:`unwrap` says why, and the command is
``destroys``, since what it runs cannot be told. So is an option whose value becomes a
command argv does not show (``env -S``/``--split-string``).
"""

from __future__ import annotations

import re

from attrs import frozen

__all__ = ["WRAPPERS", "Wrapper", "unwrap"]


@frozen
class Wrapper:
    """How one wrapper reads its options.

    Attributes:
        takes: short options that take a value.
        flags: short options that take none.
        optional: short options whose value, if any, is glued (``xargs -i{}``).
        long_takes: long options that take a value (words).
        long_flags: long options that take none (words).
        long_optional: long options whose value, if any, follows ``=`` (words).
        positional: leading words of its own after the options (``timeout``'s duration).
        numeric: an old-style number is an option (``nice -5``, ``nice --5``).
        unseen: options whose value becomes a command argv does not show.
    """

    takes: str = ""
    flags: str = ""
    optional: str = ""
    long_takes: str = ""
    long_flags: str = ""
    long_optional: str = ""
    positional: int = 0
    numeric: bool = False
    unseen: frozenset[str] = frozenset()

    def long_names(self) -> tuple[str, ...]:
        """Every long option, ``--help`` and ``--version`` too (getopt cuts against all)."""
        words = f"{self.long_takes} {self.long_flags} {self.long_optional} help version"
        return tuple(words.split())


WRAPPERS: dict[str, Wrapper] = {
    "env": Wrapper(
        takes="uCS",
        flags="i0v",
        long_takes="unset chdir split-string",
        long_flags="ignore-environment null debug list-signal-handling",
        long_optional="block-signal default-signal ignore-signal",
        unseen=frozenset({"-S", "--split-string"}),
    ),
    "nice": Wrapper(takes="n", long_takes="adjustment", numeric=True),
    "nohup": Wrapper(),
    "timeout": Wrapper(
        takes="ks",
        flags="v",
        long_takes="kill-after signal",
        long_flags="preserve-status foreground verbose",
        positional=1,
    ),
    "stdbuf": Wrapper(takes="ioe", long_takes="input output error"),
    "setsid": Wrapper(flags="cfwhV", long_flags="ctty fork wait"),
    "ionice": Wrapper(
        takes="cnpPu",
        flags="thV",
        long_takes="class classdata pid pgid uid",
        long_flags="ignore",
    ),
    "chrt": Wrapper(
        takes="TPD",
        flags="abdfiorRmpvhV",
        long_takes="sched-runtime sched-period sched-deadline",
        long_flags="batch deadline fifo idle other rr reset-on-fork all-tasks max pid verbose",
        positional=1,
    ),
    "taskset": Wrapper(flags="apchV", long_flags="all-tasks pid cpu-list", positional=1),
    "xargs": Wrapper(
        takes="adEILnPs",
        flags="0oprtx",
        optional="eil",
        long_takes="arg-file delimiter max-args max-procs max-chars process-slot-var",
        long_flags="null open-tty interactive no-run-if-empty verbose exit show-limits",
        long_optional="eof replace max-lines",
    ),
    "time": Wrapper(
        takes="fo",
        flags="apqvV",
        long_takes="format output",
        long_flags="append portability verbose quiet",
    ),
    "sudo": Wrapper(
        takes="CDghpRrTtUu",
        flags="AbEeHiKklnPSsVv",
        long_takes="close-from chdir group host prompt chroot role type command-timeout "
        "other-user user",
        long_flags="askpass background bell preserve-env edit set-home login remove-timestamp "
        "reset-timestamp list non-interactive preserve-groups stdin shell validate",
    ),
    "doas": Wrapper(takes="Cu", flags="Lns"),
    "command": Wrapper(flags="pvV"),
    "exec": Wrapper(takes="a", flags="cl"),  # the shell's builtin: exec -a NAME PROGRAM
    "unbuffer": Wrapper(flags="p"),
    "busybox": Wrapper(),
}
"""Every wrapper the classifier sees through, and how it reads its options."""

_NUMBER = re.compile(r"-[-+]?\d+")


def unwrap(name: str, args: list[str]) -> tuple[list[str], str | None]:
    """What wrapper ``name`` runs, given its ``args``: the argv after its options (and, for
    ``env``, its ``-`` and assignments; its own leading words), and ``None``; or ``[]`` and
    why that cannot be told (an option it does not know, a string it splits)."""
    spec = WRAPPERS[name]
    rest = list(args)
    while rest and rest[0].startswith("-") and rest[0] != "-":
        arg = rest.pop(0)
        if arg == "--":
            break
        if spec.numeric and _NUMBER.fullmatch(arg):
            continue
        read = _long if arg.startswith("--") else _short
        why = read(name, spec, arg, rest)
        if why is not None:
            return [], why
    if name == "env":
        while rest and (rest[0] == "-" or ("=" in rest[0] and not rest[0].startswith("="))):
            rest.pop(0)
    return rest[spec.positional :], None


def _long(name: str, spec: Wrapper, arg: str, rest: list[str]) -> str | None:
    given, eq, _ = arg[2:].partition("=")
    names = spec.long_names()
    found = [n for n in names if n == given] or [n for n in names if n.startswith(given)]
    if len(found) != 1:
        return f"{name} --{given[:24]} is not an option stockade knows, so what runs is not known"
    option = found[0]
    if f"--{option}" in spec.unseen:
        return f"{name} --{option} makes a command of a string, which argv does not show"
    if option in spec.long_takes.split() and not eq and rest:
        rest.pop(0)
    return None


def _short(name: str, spec: Wrapper, arg: str, rest: list[str]) -> str | None:
    for at, letter in enumerate(arg[1:], start=1):
        if letter in spec.takes or letter in spec.optional:
            if f"-{letter}" in spec.unseen:
                return f"{name} -{letter} makes a command of a string, which argv does not show"
            if letter in spec.takes and at == len(arg) - 1 and rest:
                rest.pop(0)  # its value is the next word
            return None  # the rest of the word is its value
        if letter not in spec.flags:
            return f"{name} -{letter} is not an option stockade knows, so what runs is not known"
    return None
