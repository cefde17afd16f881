"""The class of a script read by its parts: the strongest part, its redirections included.

Each part is classified by the classifier the caller passes (the built-in one, with the
plugins' rules), never by rules of its own, except for the few shell builtins that only
steer the shell (``cd``, ``:``, ``set``, ``exit``). A builtin that can run code or evaluate
its arguments (``eval``, ``source``, ``trap``, ``declare``, ``test -v``, ``printf -v``, ...)
leaves the script unread; so does a redirection that writes outside the writable roots.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from attrs import field, frozen

from ... import resolved
from ...display import command
from ...request.literals import Kind
from ...request.spec import ExecSpec
from ._types import Part, Script, Unread

Verdict = tuple[Kind, str]
Classify = Callable[[Sequence[str], "Context"], Verdict]
Programs = Callable[[Sequence[str]], Sequence[str]]

_SEVERITY: dict[Kind, int] = {"reads": 0, "writes": 1, "network": 2, "destroys": 3}
DEPTH = 4
"""Scripts nested in scripts read at most this deep; deeper ones are unread."""

READ_SHELLS = frozenset({"sh", "bash", "dash"})
"""The shells whose ``-c`` script is read (bash's grammar; dash reads the same plain scripts)."""
_OPTION_LETTERS = frozenset("celuxC")
_LONG_OPTIONS = frozenset({"--login", "--noprofile", "--norc", "--posix"})
_SET_OPTIONS = frozenset({"pipefail", "errexit", "nounset", "xtrace", "noclobber"})

_BUILTIN_NAMES = """
    . : [ alias bg bind break builtin caller cd command compgen complete compopt continue
    declare dirs disown echo enable eval exec exit export false fc fg getopts hash help
    history jobs kill let local logout mapfile popd printf pushd pwd read readarray readonly
    return set shift shopt source suspend test times trap true type typeset ulimit umask
    unalias unset wait coproc select function time if then else elif fi case esac for while
    until do done in
    """
BUILTINS = frozenset(_BUILTIN_NAMES.split())
"""Names bash or dash run themselves (builtins and reserved words), not as programs."""
_JUDGED_BUILTINS = frozenset({"echo", "printf", "pwd", "test", "[", "true", "false", "type"})
"""Builtins the classifier's table judges like the programs of the same name."""
_WRAPPING_BUILTINS = frozenset({"command", "exec", "time"})
"""Builtins the classifier sees through; what they run is judged."""
STEERING: dict[str, str] = {
    "cd": "cd only changes the script's folder",
    ":": ": does nothing",
    "set": "set -e, -u, -x or -o only changes how the script runs",
    "exit": "exit only ends the script",
}
DANGEROUS_ENV = frozenset(
    {"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "CDPATH", "IFS", "GLOBIGNORE"}
)
"""Variables that make a shell run code, or read words, other than the script shows."""
_DANGEROUS_PREFIXES = ("BASH_FUNC_", "LD_")
_QUIET_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/fd/1", "/dev/fd/2"})


def dangerous(name: str) -> bool:
    """Whether the variable ``name`` changes what a shell runs (``BASH_ENV``, ``BASH_FUNC_*``)."""
    return name in DANGEROUS_ENV or name.startswith(_DANGEROUS_PREFIXES)


@frozen
class Context:
    """What a script's redirections and folders are judged against.

    Attributes:
        cwd: the folder the script starts in; ``None`` when unknown (relative files written
            are then outside every root).
        writable: the real paths a command of this spec may write beneath.
        env: the names of variables in the command's environment that change what a shell
            runs (:data:`DANGEROUS_ENV`); a script run with one is unread.
        path: the command's ``PATH``, for the classifier's test of system programs.
        depth: how many scripts this one is nested in.
    """

    cwd: str | None = None
    writable: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    path: str | None = field(kw_only=True, default=None)
    depth: int = field(kw_only=True, default=0)


def context_of(spec: ExecSpec) -> Context:
    """The context a script of ``spec`` runs in: its folder, its writable roots, its env."""
    from ...confine.scratch import SCRATCH_DIRS

    roots: list[str | None] = [*spec.grant_writable, spec.home]
    if spec.mode == "workspace-write":
        roots += [spec.workspace, *spec.caches]
    if spec.mode != "danger-full-access":  # the sandbox's /tmp is the run's own
        roots += list(SCRATCH_DIRS)
    writable = tuple(dict.fromkeys(resolved.realpath(r) for r in roots if r))
    env = tuple(sorted(name for name in spec.env if dangerous(name)))
    return Context(spec.cwd, writable, env, path=spec.env.get("PATH", ""))


def shell_script(args: Sequence[str]) -> str | Unread | None:
    """The script ``SHELL ARGS`` runs with ``-c``; ``None`` when it runs no ``-c`` script."""
    script = False
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "-o" and index + 1 < len(args) and args[index + 1] in _SET_OPTIONS:
            index += 2
        elif arg in _LONG_OPTIONS:
            index += 1
        elif arg.startswith("-") and len(arg) > 1 and set(arg[1:]) <= _OPTION_LETTERS:
            script = script or "c" in arg
            index += 1
        elif arg.startswith(("-", "+")):
            return Unread(f"the shell option {arg} is not one the reader knows")
        else:
            break
    if not script:
        return None
    if index >= len(args):
        return Unread("-c is given no script")
    return args[index]


def judge(
    script: Script, context: Context, classify: Classify, programs: Programs
) -> tuple[Kind, str, tuple[str, ...]]:
    """The class of ``script``, the reason, and each part as a person reads it.

    The class is the strongest of its parts' classes and of its redirections' (a file
    written is ``writes``). A part the reader cannot judge makes the script ``destroys``.
    """
    seen = tuple(shown(part) for part in script.parts)
    if context.env:
        why = f"its environment sets {', '.join(context.env)}, which changes what a shell runs"
        return "destroys", why, seen
    if not script.parts:
        return "reads", "an empty script runs nothing", seen
    folders: set[str | None] = {context.cwd}
    strongest: tuple[Kind, str] = ("reads", "")
    for index, part in enumerate(script.parts):
        kind, why = _part(part, folders, context, classify, programs)
        if not strongest[1] or _SEVERITY[kind] > _SEVERITY[strongest[0]]:
            strongest = (kind, f"part {index + 1}, {command(part.argv)}: {why}")
    return strongest[0], strongest[1], seen


def _part(
    part: Part,
    folders: set[str | None],
    context: Context,
    classify: Classify,
    programs: Programs,
) -> Verdict:
    kind, why = _command(part, folders, context, classify, programs)
    for redirect in part.redirects:
        if not redirect.writes_file or redirect.target in _QUIET_FILES:
            continue
        outside = _outside(redirect.target, folders, context.writable)
        if outside is not None:
            return "destroys", f"it writes {outside}, outside the writable roots"
        if _SEVERITY[kind] < _SEVERITY["writes"]:
            kind, why = "writes", f"{why}; {redirect.op} writes {redirect.target}"
    return kind, why


def _command(  # noqa: PLR0911 - one return per rule a part meets
    part: Part,
    folders: set[str | None],
    context: Context,
    classify: Classify,
    programs: Programs,
) -> Verdict:
    argv = part.argv
    name, args = argv[0], argv[1:]
    if name in STEERING:
        problem = _steering(name, args, folders)
        if problem:
            return "destroys", problem
        return "reads", STEERING[name]
    if name == "exec" and args[:1] and args[0].startswith("-"):
        return "destroys", "exec with options (-a NAME, -c, -l) is not one the reader judges"
    started = programs(argv)
    for program in started:
        if program in BUILTINS and program not in _JUDGED_BUILTINS | _WRAPPING_BUILTINS:
            return "destroys", f"{program} is a shell builtin or keyword the reader does not judge"
    if any(p in ("test", "[") for p in started) and any(a in ("-v", "-R") for a in args):
        return "destroys", "test -v evaluates a name, which can run code"
    if "printf" in started and any(a.startswith("-v") for a in args):
        return "destroys", "printf -v assigns a variable, which can run code"
    inner = Context(
        next(iter(folders)) if len(folders) == 1 else None,
        context.writable,
        context.env,
        path=context.path,
        depth=context.depth + 1,
    )
    return classify(argv, inner)


def _steering(  # noqa: PLR0911 - one return per builtin's rule
    name: str, args: Sequence[str], folders: set[str | None]
) -> str:
    """Why a steering builtin is not judged, or ``""``; ``cd`` adds its folder."""
    if name == "cd":
        rest = list(args[1:]) if args[:1] == ("--",) else list(args)
        if len(rest) != 1 or rest[0] == "-" or rest[0].startswith("-"):
            return "cd without exactly one folder named is not one the reader judges"
        folders |= {os.path.normpath(os.path.join(f, rest[0])) if f else None for f in folders}
        return ""
    if name == "set":
        expect_option = False
        for arg in args:
            if expect_option:
                if arg not in _SET_OPTIONS:
                    return f"set -o {arg} is not an option the reader knows"
                expect_option = False
            elif arg in ("-o", "+o"):
                expect_option = True
            elif not (arg[:1] in "-+" and len(arg) > 1 and set(arg[1:]) <= set("euxCo")):
                return f"set {arg} is not an option the reader knows"
            else:
                expect_option = "o" in arg
        return "set -o needs an option" if expect_option else ""
    if name == "exit" and (len(args) > 1 or (args and not args[0].isdigit())):
        return "exit takes one number"
    return ""


def _outside(target: str, folders: set[str | None], writable: Sequence[str]) -> str | None:
    """The file ``target`` names outside ``writable``, from any folder the script may be in."""
    for folder in folders:
        if folder is None and not os.path.isabs(target):
            return f"{target} (from a folder the reader does not know)"
        try:
            real = resolved.realpath(os.path.join(folder or "/", target))
        except OSError as error:  # a link swapped back and forth, or one that cannot be read
            return f"{target} (cannot be resolved: {error.strerror})"
        if not any(real == root or real.startswith(root.rstrip("/") + "/") for root in writable):
            return real
    return None


def shown(part: Part) -> str:
    """A part as a person reads it: the joiner, the words as shell words, the redirections."""
    words = [command(part.argv)]
    for redirect in part.redirects:
        if redirect.op in ("<<", "<<-"):
            words.append(f"{redirect.op}{command([redirect.target])} (a here-document)")
        else:
            target = command([redirect.target]) if redirect.target else ""
            words.append(f"{redirect.fd}{redirect.op}{target}")
    text = " ".join(words)
    return f"{part.joiner} {text}" if part.joiner else text


def stronger(a: Kind, b: Kind) -> Kind:
    """The more severe of two classes."""
    return a if _SEVERITY[a] >= _SEVERITY[b] else b
