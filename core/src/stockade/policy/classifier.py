"""The built-in classifier: what a command may affect, judged from its argv alone.

A command is one of ``reads`` < ``writes`` < ``network`` < ``destroys``. The judgement is a
table: a rule per program (and, for programs such as ``git``, per subcommand), looked up
after seeing through wrappers (``env``, ``nice``, ``timeout``, ``sudo``, ``xargs``, ...),
which are classified by what they run. It never guesses at intent:

- a program that is not in the table is ``writes`` (it could do anything to the workspace);
- a shell, or an interpreter given code inline (``python -c``, ``node -e``, ...), is
  ``destroys``: the code is not argv, so nothing here can judge it;
- every reason names the rule that decided.

The module is a built-in plugin (``stockade_classify``). Another classifier plugin votes
beside it (the most severe vote wins); a plugin that knows its own programs better adds
rules to this table through ``stockade_classifier_rules`` instead (a vote can only make a
command more severe; a rule can say ``mytool status`` only reads). Rules win over the table
for the programs they name, never over the shell and inline-code checks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .. import hookimpl
from ..request.literals import Kind
from ..request.spec import ExecSpec
from ..request.verdict import Classification
from .programs import (
    _INSTALLS,
    _PACKAGE_MANAGERS,
    DESTROYS,
    INLINE,
    NETWORK,
    READS,
    SHELLS,
    WRITES,
    Rule,
    Verdict,
    _cargo,
    _command_v,
    _curl,
    _git,
    _go,
    _max,
    _package_manager,
    _rsync,
    _sed,
    _sort,
    _ssh,
    _tar,
)
from .resolve import FIXED_ENV  # PAGER=cat, set by Stockade itself
from .wrappers import WRAPPERS, unwrap

if TYPE_CHECKING:
    from .script import Context, Part

NAME = "builtin-classifier"


def _find(args: Sequence[str]) -> Verdict:
    if "-delete" in args:
        return "destroys", "find -delete removes what it finds"
    for action in ("-exec", "-execdir", "-ok", "-okdir"):
        if action in args:
            inner = list(args[args.index(action) + 1 :])
            if ";" in inner:
                inner = inner[: inner.index(";")]
            elif "+" in inner:
                inner = inner[: inner.index("+")]
            kind, why = _classify([*inner] or ["?"])
            kind = _max(kind, "writes")
            return kind, f"find {action} runs a command for each match ({why})"
    if any(a in args for a in ("-fprint", "-fprint0", "-fprintf", "-fls")):
        return "writes", "find -fprint writes a file"
    return "reads", "find without -delete, -exec or -fprint only lists"


RULES: dict[str, Rule] = {
    "sed": _sed,
    "gsed": _sed,
    "sort": _sort,
    "find": _find,
    "rsync": _rsync,
    "tar": _tar,
    "curl": _curl("curl"),
    "wget": _curl("wget"),
    **{tool: _ssh(tool) for tool in ("ssh", "scp", "sftp")},
    "git": _git,
    "go": _go,
    "cargo": _cargo,
    "command": lambda args: _command_v(args) or ("writes", "command without -v runs nothing known"),
    **{tool: _package_manager(tool, _INSTALLS) for tool in _PACKAGE_MANAGERS},
}
PROGRAM_VARIABLES = frozenset(
    [
        "GIT_SSH_COMMAND",
        "GIT_SSH",
        "GIT_EXTERNAL_DIFF",
        "GIT_PAGER",
        "GIT_EDITOR",
        "GIT_SEQUENCE_EDITOR",
        "GIT_ASKPASS",
        "GIT_PROXY_COMMAND",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_SYSTEM",
        "GIT_EXEC_PATH",
        "GIT_TEMPLATE_DIR",
        "PAGER",
        "EDITOR",
        "VISUAL",
        "SSH_ASKPASS",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "BASH_ENV",
        "ENV",
        "PROMPT_COMMAND",
        "PYTHONSTARTUP",
        "PYTHONPATH",
        "PYTHONHOME",
        "NODE_OPTIONS",
        "PERL5OPT",
        "PERL5LIB",
        "RUBYOPT",
        "RSYNC_RSH",
        "CVS_RSH",
        "TAR_OPTIONS",
        "CURL_HOME",
        "WGETRC",
    ]
)
"""Environment variables that name a program (or code) the command may run: a command given
one (``--env``, ``env NAME=...``) is ``destroys``, whatever it is."""


def names_a_program(variable: str) -> bool:
    """Whether ``variable`` names a program or code a command may run (:data:`PROGRAM_VARIABLES`,
    ``GIT_CONFIG_KEY_N`` / ``GIT_CONFIG_VALUE_N``)."""
    return variable in PROGRAM_VARIABLES or variable.startswith(
        ("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")
    )


def _runs_unseen(argv: Sequence[str], extra: Mapping[str, Rule] | None) -> str | None:
    """Why a chain of wrappers runs what argv does not show, or ``None``: an option a
    wrapper has that the table does not know, ``env -S`` (a string split into a command),
    ``env NAME=...`` of a variable that names a program, and ``xargs`` adding its input's
    words to a program whose class depends on its arguments."""
    rest = list(argv)
    while rest and os.path.basename(rest[0]) in WRAPPERS:
        name = os.path.basename(rest[0])
        if name == "command" and _command_v(rest[1:]) is not None:
            return None
        inner, why = unwrap(name, rest[1:])
        if why is not None:
            return why
        if name == "env":
            for word in rest[1 : len(rest) - len(inner)]:
                variable = word.split("=", 1)[0]
                if "=" in word and not word.startswith("-") and names_a_program(variable):
                    return f"env sets {variable}, which names a program to run"
        if name == "xargs":
            base = _base(inner[0]) if inner else ""
            if base in RULES or base in (extra or {}) or base in INLINE or base in SHELLS:
                return f"xargs adds the words of its input to {base}, whose class depends on them"
            return None
        rest = inner
    return None


def _unwrap(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """The argv a chain of wrappers runs (``[]`` when a wrapper cannot be read: see
    :func:`_runs_unseen`), and the wrappers seen."""
    seen: list[str] = []
    rest = list(argv)
    while rest:
        name = os.path.basename(rest[0])
        if name not in WRAPPERS:
            break
        if name == "command" and _command_v(rest[1:]) is not None:
            break
        seen.append(name)
        rest = unwrap(name, rest[1:])[0]
    return rest, seen


def _base(name: str) -> str:
    """``python3.12`` -> ``python``; ``/usr/bin/ls`` -> ``ls``."""
    base = os.path.basename(name)
    for interpreter in ("python", "pypy", "node", "perl", "ruby", "php", "lua"):
        if base.startswith(interpreter) and base[len(interpreter) :].replace(".", "").isdigit():
            return "python" if interpreter == "pypy" else interpreter
    return base


SYSTEM_DIRS = frozenset(
    {"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"}
)


def classify_argv(
    argv: Sequence[str],
    extra: Mapping[str, Rule] | None = None,
    *,
    path: str | None = None,
    context: Context | None = None,
) -> Verdict:
    """The class of ``argv`` and the reason, with ``extra`` rules taking precedence.

    The table knows programs by name, so ``reads`` is given only to one that is what its
    name says: named bare (found on ``path``, the command's ``PATH``, when given) or by a
    path, in a system directory. ``./ls`` in a workspace, or an ``ls`` that ``PATH`` finds
    in one, could be anything: it counts as ``writes``. ``context`` is what a shell script's
    redirections are judged against (:mod:`stockade.policy.script`).
    """
    kind, why = _classify(argv, extra, context=context)
    if kind == "reads":
        inner = _unwrap(argv)[0]
        if inner and not _trusted_name(inner[0], path):
            return (
                "writes",
                f"{inner[0]} is not the system's {_base(inner[0])}, so it counts as writes",
            )
    return kind, why


def _trusted_name(name: str, path: str | None) -> bool:
    import shutil

    if "/" in name:
        return os.path.dirname(os.path.normpath(name)) in SYSTEM_DIRS
    if path is None:
        return True
    found = shutil.which(name, path=path)
    return found is None or os.path.dirname(found) in SYSTEM_DIRS


def _classify(  # noqa: PLR0911 - one return per kind of program, in the order checked
    argv: Sequence[str], extra: Mapping[str, Rule] | None = None, *, context: Context | None = None
) -> Verdict:
    unseen = _runs_unseen(argv, extra)
    if unseen is not None:
        return "destroys", unseen
    inner, wrappers = _unwrap(argv)
    through = f" (through {' '.join(wrappers)})" if wrappers else ""
    if not inner:
        if wrappers:
            return "reads", f"{wrappers[-1]} with no command only prints"
        return "writes", "no program: treated as unknown"
    name, args = _base(inner[0]), inner[1:]
    if name in SHELLS:
        kind, why = _shell(name, args, argv[: len(argv) - len(inner)], extra, context)
        return kind, why + through
    if name in INLINE and _inline(name, args):
        return "destroys", f"{name} is given code inline, which argv cannot show{through}"
    rule = (extra or {}).get(name) or RULES.get(name)
    if rule is not None:
        kind, why = rule(args)
        return kind, why + through
    if name in INLINE:
        kind, why = _interpreter(name, args, extra)
        return kind, why + through
    return _listed(name, through)


def _shell(
    name: str,
    args: Sequence[str],
    prefix: Sequence[str],
    extra: Mapping[str, Rule] | None,
    context: Context | None,
) -> Verdict:
    """A shell's class: its ``-c`` script read by its parts, each part classified here."""
    from .script import classify_shell  # tree-sitter loads only for a command that runs a shell

    def part(words: Sequence[str], inner: Context) -> Verdict:
        return classify_argv(words, extra, path=inner.path, context=inner)

    kind, why, _shown, _parts = classify_shell(
        name, args=args, prefix=prefix, context=context, classify=part, programs=programs_run
    )
    return kind, why


def programs_run(argv: Sequence[str]) -> tuple[str, ...]:
    """The programs ``argv`` starts, by name: each wrapper, then what they run, then the
    programs of each part of a shell script it runs, when the script is read by its parts.

    A program named by a path outside the system directories keeps its path: ``/tmp/git``
    is not ``git``.
    """
    inner, wrappers = _unwrap(argv)
    if not inner:
        return tuple(wrappers)
    name = inner[0]
    trusted = "/" not in name or os.path.dirname(os.path.normpath(name)) in SYSTEM_DIRS
    found = (*wrappers, os.path.basename(name) if trusted else name)
    if _base(name) in SHELLS:
        from .script import STEERING  # the builtins that only steer the shell start nothing

        parts = [part for part in script_parts(argv) if part.argv[0] not in STEERING]
        found += tuple(p for part in parts for p in programs_run(part.argv))
    return tuple(dict.fromkeys(found))


def script_parts(argv: Sequence[str]) -> tuple[Part, ...]:
    """The parts of the shell script ``argv`` runs (through wrappers), or ``()`` when it runs
    none or the script is not read by its parts."""
    inner = _unwrap(argv)[0]
    if not inner or _base(inner[0]) not in SHELLS:
        return ()
    from .script import READ_SHELLS, Script, read_cached, shell_script

    text = shell_script(inner[1:]) if _base(inner[0]) in READ_SHELLS else None
    script = read_cached(text) if isinstance(text, str) else None
    return script.parts if isinstance(script, Script) else ()


def _inline(name: str, args: Sequence[str]) -> bool:
    flags = INLINE[name]
    return not flags or any(a in flags or a.split("=", 1)[0] in flags for a in args)


def _interpreter(name: str, args: Sequence[str], extra: Mapping[str, Rule] | None) -> Verdict:
    if _inline(name, args):
        return "destroys", f"{name} is given code inline, which argv cannot show"
    if name == "python" and args[:1] == ["-m"] and args[1:2]:
        module = args[1]
        if module in RULES or module in READS | WRITES | NETWORK | DESTROYS:
            kind, why = _classify([module, *args[2:]], extra)
            return kind, f"python -m {module}: {why}"
        return "writes", f"python -m {module} runs a module"
    return "writes", f"{name} runs a script, which may change anything"


def _listed(name: str, through: str) -> Verdict:
    if name.startswith("mkfs"):
        return "destroys", f"{name} makes a file system, erasing what was there{through}"
    tables: tuple[tuple[frozenset[str], Kind], ...] = (
        (DESTROYS, "destroys"),
        (NETWORK, "network"),
        (WRITES, "writes"),
        (READS, "reads"),
    )
    for table, kind in tables:
        if name in table:
            return kind, f"{name} is listed as {kind}{through}"
    return "writes", f"{name} is not a known program, so it counts as writes{through}"


@hookimpl
def stockade_classify(spec: ExecSpec, rules: Mapping[str, Rule]) -> Classification:
    """Classify ``spec.argv`` with the built-in table and the plugins' rules."""
    inner = _unwrap(spec.argv)[0]
    context, parts = None, tuple[str, ...]()
    if inner and _base(inner[0]) in SHELLS:
        from .script import context_of, shown

        context, parts = context_of(spec), tuple(map(shown, script_parts(spec.argv)))
    kind, why = classify_argv(spec.argv, rules, path=spec.env.get("PATH", ""), context=context)
    named = sorted(
        v for v, value in spec.env.items() if names_a_program(v) and FIXED_ENV.get(v) != value
    )
    if named:  # --env GIT_SSH_COMMAND=...: the program it runs is not in argv
        kind, why = "destroys", f"its environment sets {named[0]}, which names a program to run"
    if kind == "reads" and os.path.dirname(spec.program) not in SYSTEM_DIRS:
        kind, why = "writes", f"{spec.program} is not in a system directory, so it counts as writes"
    return Classification(kind, (why,), by=(NAME,), programs=programs_run(spec.argv), parts=parts)
