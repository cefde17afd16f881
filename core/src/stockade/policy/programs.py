"""The built-in classifier's table: what each known program reads, writes, fetches or destroys,
and the rules for programs whose arguments decide it (git, sed, rsync, package managers)."""

from __future__ import annotations

from collections.abc import Sequence

from ..request.literals import ClassifierRule, Kind

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


def _rsync(args: Sequence[str]) -> Verdict:
    for arg in args:
        if arg.split("=", 1)[0] in ("-e", "--rsh", "--rsync-path") or (
            arg.startswith("-e") and not arg.startswith("--")
        ):
            return "destroys", f"rsync {arg.split('=', 1)[0][:12]} names a program to run"
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
    runs = _git_runs(sub, sub_args)
    if runs is not None:
        return "destroys", runs
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


_GIT_PROGRAM_OPTIONS = ("--upload-pack", "--receive-pack", "--exec", "--extcmd", "-x", "-u")
"""Options that name a program git runs (``fetch --upload-pack``, ``difftool -x``, ``rebase
-x``, ``clone -u``), given apart (``-x CMD``) or glued (``--exec=CMD``)."""
_GIT_RUNS_SUBCOMMANDS = {
    "bisect": "run",
    "submodule": "foreach",
}


def _git_runs(sub: str, args: Sequence[str]) -> str | None:
    """Why ``git SUB ARGS`` runs a program it is given, or ``None``."""
    if _GIT_RUNS_SUBCOMMANDS.get(sub) in args[:1] or sub == "filter-branch":
        return f"git {sub} {args[0] if args else ''} runs a command it is given".replace("  ", " ")
    for arg in args:
        if arg == "--":
            break
        option = arg.split("=", 1)[0]
        if option in _GIT_PROGRAM_OPTIONS and not (sub in ("add", "commit", "log") and arg == "-u"):
            return f"git {sub} {option} names a program git runs"
    return None


def _ssh(tool: str) -> Rule:
    """ssh, scp, sftp: ``network``, unless an option or a config file names a program to run
    (``-o ProxyCommand=...``, ``-F FILE``, ``scp -S PROGRAM``): then ``destroys``."""

    def rule(args: Sequence[str]) -> Verdict:
        given = list(args)
        for i, arg in enumerate(given):
            if arg == "--":
                break
            if arg.startswith("-F") or (tool != "ssh" and arg.startswith(("-S", "-D"))):
                return "destroys", f"{tool} {arg[:2]} reads a file or names a program to run"
            if arg.startswith("-I") and tool == "ssh":
                return "destroys", "ssh -I loads a PKCS#11 library"
            if arg.startswith("-o"):
                value = arg[2:] or (given[i + 1] if i + 1 < len(given) else "")
                key = value.replace("=", " ").split(" ", 1)[0].strip().lower()
                if key in _SSH_COMMAND_KEYS:
                    return "destroys", f"{tool} -o {key} names a command to run"
        return "network", f"{tool} connects to a remote host"

    return rule


_SSH_COMMAND_KEYS = frozenset(
    {
        "proxycommand",
        "localcommand",
        "permitlocalcommand",
        "knownhostscommand",
        "match",
        "include",
        "pkcs11provider",
        "securitykeyprovider",
        "sshaskpass",
    }
)


def _tar(args: Sequence[str]) -> Verdict:
    runs = (
        "--to-command",
        "--use-compress-program",
        "--checkpoint-action",
        "--info-script",
        "--new-volume-script",
        "--rsh-command",
        "--rmt-command",
    )
    for arg in args:
        if arg.split("=", 1)[0] in runs:
            return "destroys", f"tar {arg.split('=', 1)[0][:24]} runs a program it is given"
        if arg.startswith("-") and not arg.startswith("--") and ("F" in arg or "I" in arg):
            return "destroys", "tar -F or -I runs a program it is given"
    return "writes", "tar makes or unpacks archives"


def _curl(tool: str) -> Rule:
    """curl and wget: ``network``; with options read from a file (``curl -K``, ``wget -e`` or
    ``--config``) argv does not show what they do: ``destroys``."""

    def rule(args: Sequence[str]) -> Verdict:
        for arg in args:
            if arg == "--":
                break
            option = arg.split("=", 1)[0]
            if option in ("-K", "--config", "-e", "--execute") or (
                tool == "curl" and arg.startswith("-K")
            ):
                return "destroys", f"{tool} {option[:9]} takes options argv does not show"
        return "network", f"{tool} talks to the network"

    return rule


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


def _max(a: Kind, b: Kind) -> Kind:
    return a if _SEVERITY[a] >= _SEVERITY[b] else b
