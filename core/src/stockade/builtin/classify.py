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

from .. import hookimpl
from ..types import Classification, ClassifierRule, ExecSpec, Kind

NAME = "builtin-classifier"

Verdict = tuple[Kind, str]
Rule = ClassifierRule

_SEVERITY: dict[Kind, int] = {"reads": 0, "writes": 1, "network": 2, "destroys": 3}


def _names(text: str) -> frozenset[str]:
    """A set of program names, written as words."""
    return frozenset(text.split())


SHELLS = frozenset({"sh", "bash", "zsh", "dash", "fish", "ksh", "mksh", "csh", "tcsh", "ash"})
# interpreter -> the options that give it code inline
INLINE = {
    "python": {"-c"},
    "node": {"-e", "--eval", "-p", "--print"},
    "nodejs": {"-e", "--eval", "-p", "--print"},
    "deno": {"eval"},
    "bun": {"-e", "--eval"},
    "perl": {"-e", "-E"},
    "ruby": {"-e"},
    "php": {"-r"},
    "lua": {"-e"},
    "Rscript": {"-e"},
    "osascript": {"-e"},
    "awk": set(),  # the program text is the first argument: always inline
    "gawk": set(),
    "mawk": set(),
}
READS = _names(
    """
    ls cat head tail wc grep egrep fgrep rg ag stat file diff cmp pwd echo printf true false
    which whereis type whoami id date uname hostname printenv du df tree less more cut tr
    uniq nl jq yq md5sum sha1sum sha256sum sha512sum b2sum cksum realpath basename dirname
    readlink test [ seq expr column fold rev od hexdump xxd strings comm join paste look
    getconf locale nproc free uptime ps pgrep lsof env-show man info help tldr
    """
)
WRITES = _names(
    """
    cp mv mkdir touch tee ln chmod chown chgrp install patch make cmake ninja meson gcc cc
    g++ clang clang++ rustc javac tar zip unzip gzip gunzip bzip2 xz unxz zstd mktemp pytest
    tox nox ruff black isort mypy eslint prettier tsc jest vitest mvn gradle bazel ctest
    go-test mkfifo split csplit
    """
)
NETWORK = _names(
    """
    curl wget ssh scp sftp gh nc ncat netcat telnet ftp ping traceroute dig nslookup host
    git-remote-http http https aria2c
    """
)
DESTROYS = _names(
    """
    rm rmdir shred dd truncate wipefs fdisk sfdisk parted unlink srm
    """
)


def _simple(kind: Kind, why: str) -> Rule:
    return lambda _args: (kind, why)


def _flagged(args: Sequence[str], *flags: str) -> bool:
    """Whether any of ``flags`` is given: ``-i``, ``-i.bak``, ``-ni``, ``--in-place=SUF``."""
    for arg in args:
        if arg == "--":
            return False
        for flag in flags:
            if arg == flag or (flag.startswith("--") and arg.startswith(flag + "=")):
                return True
            short = len(flag) == 2 and flag[0] == "-"
            if short and arg.startswith("-") and not arg.startswith("--"):
                letters = arg[1:]
                if letters.startswith(flag[1]) or (letters.isalpha() and flag[1] in letters):
                    return True
    return False


def _sed(args: Sequence[str]) -> Verdict:
    if _flagged(args, "-i", "--in-place"):
        return "writes", "sed -i edits files in place"
    return "reads", "sed without -i only prints"


def _sort(args: Sequence[str]) -> Verdict:
    if _flagged(args, "-o", "--output"):
        return "writes", "sort -o writes a file"
    return "reads", "sort only prints"


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


def _rsync(args: Sequence[str]) -> Verdict:
    remote = any(
        "::" in a or a.startswith("rsync://") or (":" in a and not a.startswith(("-", "/", ".")))
        for a in args
    )
    if _flagged(args, "--delete", "--delete-before", "--delete-after", "--remove-source-files"):
        return "destroys", "rsync --delete removes files"
    if remote:
        return "network", "rsync to or from a remote host"
    return "writes", "rsync between local paths copies files"


def _git(args: Sequence[str]) -> Verdict:  # noqa: PLR0911 - one return per rule
    rest = list(args)
    while rest and rest[0].startswith("-"):  # global options: -C DIR, -c k=v, --no-pager
        option = rest.pop(0)
        if option in ("-c", "--config-env", "--exec-path") or option.startswith(
            ("--config-env=", "--exec-path=")
        ):
            # core.fsmonitor, diff.external, core.sshCommand, ...: a setting can be a command.
            return "destroys", f"git {option} sets configuration, which can name a command to run"
        if option in ("-C", "--git-dir", "--work-tree", "--namespace") and rest:
            rest.pop(0)
    if not rest:
        return "reads", "git without a subcommand prints help"
    sub, sub_args = rest[0], rest[1:]
    if sub in _GIT_READS:
        if sub == "grep" and any(a.startswith(("-O", "--open-files-in-pager")) for a in sub_args):
            return "destroys", f"git {sub} -O runs a program on the files it finds"
        if any(a == "--output" or a.startswith("--output=") for a in sub_args):
            return "writes", f"git {sub} --output writes a file"
        return "reads", f"git {sub} only reads the repository"
    special = _GIT_SPECIAL.get(sub)
    if special is not None:
        return special(sub_args)
    if sub in _GIT_NETWORK:
        return "network", f"git {sub} talks to a remote"
    return "writes", f"git {sub} changes the repository or the working tree"


def _git_branch(args: Sequence[str]) -> Verdict:
    if _flagged(args, "-D") or ("--delete" in args and "--force" in args):
        return "destroys", "git branch -D deletes a branch whatever it holds"
    listing = ("--list", "-l", "-a", "--all", "-r", "--remotes", "-v", "-vv", "--show-current")
    if all(a in listing or a.startswith("--sort") for a in args):
        return "reads", "git branch lists branches"
    return "writes", "git branch changes branches"


def _git_tag(args: Sequence[str]) -> Verdict:
    if not args or args[0] in ("-l", "--list"):
        return "reads", "git tag lists tags"
    return "writes", "git tag changes tags"


def _git_push(args: Sequence[str]) -> Verdict:
    forced = _flagged(args, "--force", "-f", "--force-with-lease", "--delete", "--mirror")
    if forced or any(a.startswith(("+", ":")) for a in args):
        return "destroys", "git push --force (or --delete) rewrites or removes remote history"
    return "network", "git push sends commits to a remote"


def _git_reset(args: Sequence[str]) -> Verdict:
    if "--hard" in args:
        return "destroys", "git reset --hard discards uncommitted work"
    return "writes", "git reset moves the branch or the index"


def _git_clean(args: Sequence[str]) -> Verdict:
    if _flagged(args, "-f", "--force"):
        return "destroys", "git clean -f deletes untracked files"
    return "reads", "git clean without -f only says what it would delete"


def _git_discard(sub: str) -> Rule:
    def rule(args: Sequence[str]) -> Verdict:
        if "--" in args or (sub == "restore" and args):
            return "destroys", f"git {sub} -- PATH discards changes to those paths"
        return "writes", f"git {sub} changes the working tree"

    return rule


def _git_stash(args: Sequence[str]) -> Verdict:
    if args[:1] in (["drop"], ["clear"]):
        return "destroys", f"git stash {args[0]} discards stashed work"
    if args[:1] in (["list"], ["show"]):
        return "reads", f"git stash {args[0]} only reads"
    return "writes", "git stash changes the working tree"


def _git_submodule(args: Sequence[str]) -> Verdict:
    if args[:1] == ["update"] or "--init" in args:
        return "network", "git submodule update fetches from remotes"
    if not args or args[:1] == ["status"]:
        return "reads", "git submodule status only reads"
    return "writes", "git submodule changes the repository"


def _git_remote(args: Sequence[str]) -> Verdict:
    if not args or args[0] in ("-v", "show", "get-url"):
        return "reads", "git remote lists remotes"
    if args[0] == "update":
        return "network", "git remote update fetches from remotes"
    return "writes", "git remote changes the configuration"


_GIT_SPECIAL: dict[str, Rule] = {
    "branch": _git_branch,
    "tag": _git_tag,
    "push": _git_push,
    "reset": _git_reset,
    "clean": _git_clean,
    "checkout": _git_discard("checkout"),
    "restore": _git_discard("restore"),
    "stash": _git_stash,
    "submodule": _git_submodule,
    "remote": _git_remote,
    "rm": _simple("destroys", "git rm deletes files"),
}


_GIT_READS = _names(
    """
    status log diff show blame rev-parse ls-files ls-tree cat-file describe shortlog grep
    reflog show-ref for-each-ref name-rev whatchanged help version count-objects
    check-ignore
    """
)
_GIT_NETWORK = frozenset(["fetch", "pull", "clone", "ls-remote", "archive", "request-pull"])


def _go(args: Sequence[str]) -> Verdict:
    sub = args[0] if args else ""
    if sub in ("vet", "version", "env", "list", "doc", "help", "fmt-check"):
        return "reads", f"go {sub} only reads"
    if sub == "get" or (sub == "mod" and args[1:2] in (["download"], ["tidy"])):
        return "network", f"go {' '.join(args[:2])} downloads modules"
    if sub == "install" and any("@" in a for a in args[1:]):
        return "network", "go install PKG@VERSION downloads it"
    return "writes", f"go {sub} builds, tests or changes files"


def _package_manager(tool: str, installs: frozenset[str]) -> Rule:
    def rule(args: Sequence[str]) -> Verdict:
        positional = [a for a in args if not a.startswith("-")]
        sub = positional[0] if positional else ""
        if tool in ("pip", "pip3", "uv") and sub == "pip" and positional[1:2]:
            sub = positional[1]
        if sub in installs:
            return "network", f"{tool} {sub} downloads packages"
        if sub in ("uninstall", "remove", "rm"):
            return "writes", f"{tool} {sub} removes installed packages"
        if sub in ("list", "show", "freeze", "--version", "help", "search", "info", "tree"):
            return "reads", f"{tool} {sub} only reads"
        return "writes", f"{tool} {sub or 'run'} may change the environment or the workspace"

    return rule


def _cargo(args: Sequence[str]) -> Verdict:
    sub = next((a for a in args if not a.startswith("-")), "")
    if sub in ("install", "add", "fetch", "update", "publish", "search", "login"):
        return "network", f"cargo {sub} talks to a registry"
    if sub in ("metadata", "tree", "version", "help", "--version"):
        return "reads", f"cargo {sub} only reads"
    return "writes", f"cargo {sub} builds, tests or changes files"


def _command_v(args: Sequence[str]) -> Verdict | None:
    if args[:1] in (["-v"], ["-V"]):
        return "reads", "command -v only looks a program up"
    return None


_INSTALLS = frozenset(
    {"install", "add", "sync", "ci", "update", "upgrade", "download", "lock", "i"}
)
_PACKAGE_MANAGERS = ("pip", "pip3", "uv", "npm", "pnpm", "yarn", "poetry", "pipx", "gem", "bundle")
RULES: dict[str, Rule] = {
    "sed": _sed,
    "gsed": _sed,
    "sort": _sort,
    "find": _find,
    "rsync": _rsync,
    "git": _git,
    "go": _go,
    "cargo": _cargo,
    "command": lambda args: _command_v(args) or ("writes", "command without -v runs nothing known"),
    **{tool: _package_manager(tool, _INSTALLS) for tool in _PACKAGE_MANAGERS},
}
# Wrappers: program -> how many leading arguments are theirs (options are skipped too).
WRAPPERS: dict[str, int] = {
    "env": 0,
    "nice": 0,
    "nohup": 0,
    "timeout": 1,
    "sudo": 0,
    "doas": 0,
    "command": 0,
    "exec": 0,
    "stdbuf": 0,
    "ionice": 0,
    "time": 0,
    "setsid": 0,
    "taskset": 1,
    "chrt": 1,
    "unbuffer": 0,
    "xargs": 0,
    "busybox": 0,
}
_WRAPPER_OPTIONS_WITH_VALUES = {
    "env": {"-u", "--unset", "-C", "--chdir", "-S", "--split-string"},
    "nice": {"-n", "--adjustment"},
    "timeout": {"-s", "--signal", "-k", "--kill-after"},
    "sudo": {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"},
    "xargs": {"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--delimiter", "--max-args"},
    "ionice": {"-c", "-n", "-p"},
    "stdbuf": {"-i", "-o", "-e"},
}


def _unwrap(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """The argv a chain of wrappers runs, and the wrappers seen."""
    seen: list[str] = []
    rest = list(argv)
    while rest:
        name = os.path.basename(rest[0])
        if name not in WRAPPERS:
            break
        if name == "command" and _command_v(rest[1:]) is not None:
            break
        seen.append(name)
        rest = rest[1:]
        takes = _WRAPPER_OPTIONS_WITH_VALUES.get(name, set())
        while rest and rest[0].startswith("-") and rest[0] != "-":
            option = rest.pop(0)
            if option == "--":
                break
            if option in takes and rest:
                rest.pop(0)
        if name == "env":
            while rest and "=" in rest[0] and not rest[0].startswith("="):
                rest.pop(0)
        for _ in range(WRAPPERS[name]):
            if rest:
                rest.pop(0)
    return rest, seen


def _base(name: str) -> str:
    """``python3.12`` -> ``python``; ``/usr/bin/ls`` -> ``ls``."""
    base = os.path.basename(name)
    for interpreter in ("python", "pypy", "node", "perl", "ruby", "php", "lua"):
        if base.startswith(interpreter) and base[len(interpreter) :].replace(".", "").isdigit():
            return "python" if interpreter == "pypy" else interpreter
    return base


def _max(a: Kind, b: Kind) -> Kind:
    return a if _SEVERITY[a] >= _SEVERITY[b] else b


SYSTEM_DIRS = frozenset(
    {"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"}
)


def classify_argv(
    argv: Sequence[str],
    extra: Mapping[str, Rule] | None = None,
    *,
    path: str | None = None,
) -> Verdict:
    """The class of ``argv`` and the reason, with ``extra`` rules taking precedence.

    The table knows programs by name, so ``reads`` is given only to one that is what its
    name says: named bare (found on ``path``, the command's ``PATH``, when given) or by a
    path, in a system directory. ``./ls`` in a workspace, or an ``ls`` that ``PATH`` finds
    in one, could be anything: it counts as ``writes``.
    """
    kind, why = _classify(argv, extra)
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
    argv: Sequence[str], extra: Mapping[str, Rule] | None = None
) -> Verdict:
    inner, wrappers = _unwrap(argv)
    through = f" (through {' '.join(wrappers)})" if wrappers else ""
    if not inner:
        if wrappers:
            return "reads", f"{wrappers[-1]} with no command only prints"
        return "writes", "no program: treated as unknown"
    name, args = _base(inner[0]), inner[1:]
    if name in SHELLS:
        return "destroys", f"{name} runs a shell script, which argv cannot show{through}"
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


def programs_run(argv: Sequence[str]) -> tuple[str, ...]:
    """The programs ``argv`` starts, by name: each wrapper, then what they run.

    A program named by a path outside the system directories keeps its path: ``/tmp/git``
    is not ``git``.
    """
    inner, wrappers = _unwrap(argv)
    if not inner:
        return tuple(wrappers)
    name = inner[0]
    trusted = "/" not in name or os.path.dirname(os.path.normpath(name)) in SYSTEM_DIRS
    return (*wrappers, os.path.basename(name) if trusted else name)


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
    kind, why = classify_argv(spec.argv, rules, path=spec.env.get("PATH", ""))
    if kind == "reads" and os.path.dirname(spec.program) not in SYSTEM_DIRS:
        kind, why = "writes", f"{spec.program} is not in a system directory, so it counts as writes"
    return Classification(kind, (why,), by=(NAME,), programs=programs_run(spec.argv))
