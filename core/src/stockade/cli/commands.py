"""The ``stockade`` commands, split by command group; each group imports only what it uses.

Exit status: the command's own; 128+N when killed by signal N; 124 when timed out; 130 when
interrupted; 125 for Stockade's own errors (usage, config, sandbox unavailable); 126 denied or
held by policy, or the program could not be started; 127 program not found. ``approve``
exits with the status of the command it ran.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from .. import __version__

EXIT_USAGE = 125
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a filter whose reader left


def _formatter(prog: str) -> argparse.HelpFormatter:
    # With no width, argparse imports shutil for the terminal size: ~6 ms on every start.
    try:
        width = os.get_terminal_size(sys.stderr.fileno()).columns - 2
    except (OSError, ValueError):
        width = 78
    return argparse.HelpFormatter(prog, width=width)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _formatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"stockade: error[usage]: {message}", file=sys.stderr)
        hint = _suggestion(self, message)
        if hint:
            print(f"  hint: {hint}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """What a newcomer most likely meant: an option put before its command word, a
    misspelled option, a misspelled command."""
    import difflib

    commands = {
        name: sub
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name, sub in action.choices.items()
    }
    own = {o for action in parser._actions for o in action.option_strings}
    if message.startswith("unrecognized arguments: "):
        for token in message.removeprefix("unrecognized arguments: ").split():
            option = token.split("=", 1)[0]
            if not option.startswith("--"):
                continue
            homes = sorted(
                name
                for name, sub in commands.items()
                if any(option in a.option_strings for a in sub._actions)
            )
            if homes and option not in own:
                where = " or ".join(f"`stockade {name} {option} ...`" for name in homes[:3])
                return f"{option} belongs after the command word: {where}"
            known = own | {
                o for sub in commands.values() for a in sub._actions for o in a.option_strings
            }
            close = difflib.get_close_matches(option, sorted(known), n=1)
            if close:
                return f"did you mean {close[0]}?"
    found = re.search(r"invalid choice: '([^']*)'", message)
    if found and commands:
        close = difflib.get_close_matches(found.group(1), sorted(commands), n=1)
        if close:
            return f"did you mean `stockade {close[0]}`?"
    return ""


def _add_run_options(run: argparse.ArgumentParser) -> None:
    """The options of ``run`` and ``start``: the request, and the run it belongs to."""
    run.add_argument("--mode", choices=("read-only", "workspace-write", "danger-full-access"))
    run.add_argument("--sandbox", metavar="NAME", help="sandbox provider (default: auto)")
    run.add_argument("--cwd", metavar="DIR", help="working directory (default: here)")
    run.add_argument("--timeout", metavar="SECONDS", type=float, help="default and cap from config")
    run.add_argument("--memory-mb", metavar="N", type=int, help="memory limit in MiB")
    run.add_argument(
        "--env",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="pass one environment entry (repeatable)",
    )
    run.add_argument(
        "--profile", "--agent", metavar="AGENT", default="default", help="agent profile"
    )
    run.add_argument(
        "--secret",
        metavar="NAME=HANDLE",
        action="append",
        default=[],
        help="give the command the credential HANDLE as $NAME (resolved by a broker)",
    )
    run.add_argument("--yes", action="store_true", help="approve in advance what would ask")
    run.add_argument(
        "--grant-write",
        metavar="DIR",
        action="append",
        default=[],
        help="make DIR writable for this command only (a one-shot grant; repeatable)",
    )
    run.add_argument(
        "--read-private",
        action="store_true",
        help="show this command the profile's private paths (hidden otherwise); its run then "
        "holds private data, for the breaker",
    )
    run.add_argument("--json", action="store_true", help="print the result as JSON")
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="run it in a layer and land nothing: say what it would have changed",
    )
    run.add_argument(
        "--run",
        dest="run_name",
        metavar="RUN",
        help="the run this command is a step of, kept across calls by the warm server "
        "(its budget counts them all; also STOCKADE_RUN)",
    )


def _add_task_commands(commands: Any) -> None:  # noqa: ANN401 - argparse's subparsers action
    """``stockade start|read|kill|tasks``: background tasks, kept by the warm server."""
    start = commands.add_parser(
        "start",
        help="start one command in the background; print its task id",
        description="Start one command by argv in the background, as run does; print its "
        "task id. Its output is read with `stockade read ID`. Needs the warm server.",
    )
    _add_run_options(start)
    start.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARG...]")
    read = commands.add_parser("read", help="what a background task printed since the last read")
    read.add_argument("task", metavar="ID")
    read.add_argument("--follow", action="store_true", help="keep reading until it ends")
    kill = commands.add_parser("kill", help="kill a background task and all it started")
    kill.add_argument("task", metavar="ID")
    tasks = commands.add_parser("tasks", help="list the background tasks of this run")
    for sub in (read, kill, tasks):
        sub.add_argument("--run", dest="run_name", metavar="RUN", help="the run (STOCKADE_RUN)")
        sub.add_argument("--json", action="store_true")


def _add_serve_command(commands: Any) -> None:  # noqa: ANN401 - argparse's subparsers action
    """``stockade serve [--status | --stop] [--idle-timeout S]``."""
    serve = commands.add_parser(
        "serve",
        help="the warm server the command line talks to (started on first use)",
        description="Run the warm per-user server in the foreground (for a supervisor such "
        "as a systemd user unit), or ask the running one for its status, or stop it.",
    )
    how = serve.add_mutually_exclusive_group()
    how.add_argument("--status", action="store_true", help="say whether it runs, and how")
    how.add_argument("--stop", action="store_true", help="stop it (its commands are killed)")
    serve.add_argument(
        "--idle-timeout",
        metavar="SECONDS",
        type=float,
        help="exit after this long with nothing running (default 900, or STOCKADE_SERVER_IDLE)",
    )
    serve.add_argument("--json", action="store_true")


def _add_file_commands(commands: Any) -> None:  # noqa: ANN401 - argparse's subparsers action
    """``stockade file list|read|write``."""
    file = commands.add_parser("file", help="list, read or write files in the workspace")
    tools = file.add_subparsers(dest="tool", metavar="TOOL", parser_class=_Parser, required=True)
    for tool, what in (
        ("list", "names, kinds and sizes in a folder"),
        ("read", "a text file (up to 256 KiB per call); a binary one is described"),
        ("write", "a whole file (up to 1 MiB) from stdin, atomically"),
    ):
        sub = tools.add_parser(tool, help=what, description=what.capitalize() + ".")
        sub.add_argument("path", metavar="PATH", nargs="?" if tool == "list" else None, default=".")
        sub.add_argument("--profile", "--agent", metavar="AGENT", default="default")
        sub.add_argument("--json", action="store_true")
        sub.add_argument(
            "--run",
            dest="run_name",
            metavar="RUN",
            help="the run this tool call is part of: what it read taints the run, for the "
            "breaker (also STOCKADE_RUN)",
        )
        if tool != "write":
            sub.add_argument(
                "--view",
                metavar="ACTION",
                help="as running command ACTION sees it: its layer over the folder "
                "(`stockade tasks` shows a task's action id)",
            )
        if tool == "read":
            sub.add_argument(
                "--read-private",
                action="store_true",
                help="read private data (refused otherwise); the run then holds private data",
            )
            sub.add_argument("--offset", type=int, default=0, metavar="BYTES")
            sub.add_argument("--limit", type=int, default=256 * 1024, metavar="BYTES")


def build_parser() -> argparse.ArgumentParser:
    """The parser of the built-in commands (handlers are imported only when chosen)."""
    return _build()[0]


_BUILT: list[argparse.ArgumentParser] = []


def _parser() -> argparse.ArgumentParser:
    """:func:`build_parser`, built once per process: the warm server parses every call with
    it (building one costs ~18 ms, most of it gettext looking up translations)."""
    if not _BUILT:
        _BUILT.append(build_parser())
    return _BUILT[0]


def _build() -> tuple[argparse.ArgumentParser, Any]:
    """The built-in commands' parser and its subparsers action (where plugins add theirs)."""
    parser = _Parser(prog="stockade", description="Run an agent's commands, confined and bounded.")
    parser.add_argument("--version", action="version", version=f"stockade {__version__}")
    parser.add_argument("--config", metavar="PATH", help="config file (else STOCKADE_CONFIG)")
    parser.add_argument(
        "--no-server",
        action="store_true",
        help="run in this process, not through the warm server (also STOCKADE_NO_SERVER=1)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = commands.add_parser(
        "run",
        help="run one command",
        description="Run one command by argv: classified, approved, confined, bounded.",
    )
    _add_run_options(run)
    run.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARG...]")

    _add_task_commands(commands)
    classify = commands.add_parser("classify", help="say what a command may affect (runs nothing)")
    classify.add_argument("--json", action="store_true", help="print the classification as JSON")
    classify.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARG...]")

    pending = commands.add_parser("pending", help="list the steps waiting for a person")
    pending.add_argument("--json", action="store_true")
    for verb, what in (("approve", "approve a held step and run it"), ("decline", "refuse it")):
        answer = commands.add_parser(verb, help=what, description=f"{what.capitalize()}.")
        answer.add_argument("run", metavar="RUN", help="the run id the held result named")
        answer.add_argument("step", metavar="STEP", type=int, help="the step number")
        answer.add_argument("--json", action="store_true")
        # Who answers, as the record names them: the run page answers through the server.
        answer.add_argument("--via", choices=("cli", "ui"), default="cli", help=argparse.SUPPRESS)

    land = commands.add_parser(
        "land",
        help="list the writes waiting for a person (commit = ask), or land or refuse them",
        description="List the commands whose writes wait for a person (commit = ask); "
        "with ACTION, land them, or with --refuse discard them (recorded).",
    )
    land.add_argument("action", nargs="?", metavar="ACTION", help="the command's action id")
    land.add_argument("--refuse", action="store_true", help="discard them: nothing lands")
    land.add_argument("--json", action="store_true")

    _add_file_commands(commands)
    workspace = commands.add_parser("workspace", help="an agent's workspace: where, how big")
    workspace.add_argument("name", metavar="AGENT")
    workspace.add_argument("--clear", action="store_true", help="empty it (recorded)")
    workspace.add_argument("--json", action="store_true")

    log = commands.add_parser("log", help="list the recorded steps")
    log.add_argument("--run", metavar="RUN", help="only this run")
    log.add_argument("--json", action="store_true")
    show = commands.add_parser("show", help="the whole output of a recorded step")
    show.add_argument("run", metavar="RUN")
    show.add_argument("step", metavar="STEP", type=int)
    replay = commands.add_parser("replay", help="a run as one timeline of events")
    replay.add_argument("run", metavar="RUN")
    replay.add_argument("--redact", action="store_true", help="without argv, cwd and output")
    replay.add_argument("--json", action="store_true")
    verify = commands.add_parser("verify", help="check every link, signature and output blob")
    verify.add_argument("--json", action="store_true")

    plugins = commands.add_parser("plugins", help="list the installed plugins")
    plugins.add_argument("--json", action="store_true")
    doctor = commands.add_parser("doctor", help="say what works on this machine and why not")
    doctor.add_argument("--json", action="store_true")
    _add_serve_command(commands)
    return parser, commands


# command -> (module, handler); each module is imported only when its command is chosen.
HANDLERS: dict[str, tuple[str, str]] = {
    "run": ("run", "run_command"),
    "classify": ("classify", "classify_command"),
    "pending": ("approve", "pending_command"),
    "approve": ("approve", "approve_command"),
    "decline": ("approve", "decline_command"),
    "land": ("approve", "land_command"),
    "file": ("files", "file_command"),
    "workspace": ("workspace", "workspace_command"),
    "log": ("record", "log_command"),
    "show": ("record", "show_command"),
    "replay": ("record", "replay_command"),
    "verify": ("record", "verify_command"),
    "plugins": ("plugins", "plugins_command"),
    "doctor": ("doctor", "doctor_command"),
    "serve": ("serve", "serve_command"),
    "start": ("tasks", "start_command"),
    "read": ("tasks", "read_command"),
    "kill": ("tasks", "kill_command"),
    "tasks": ("tasks", "tasks_command"),
}


# Commands offered by distributions of the project, for a clear error when one is not there
# (plain data: core names these distributions, it never imports them).
ELSEWHERE: dict[str, tuple[str, str]] = {
    "skill": ("stockade-skills", "Agent Skills are"),
    "mcp": ("stockade-mcp", "the MCP server is"),
    "ui": ("stockade-ui", "the run page is"),
}


_PRE: list[argparse.ArgumentParser] = []


def _command_word(argv: Sequence[str]) -> tuple[str | None, str | None, bool] | None:
    """``(config, command, help)`` as the top level reads them, or ``None`` when only the
    built-in parser can say (``--version``, an option it does not know, a missing value)."""
    if not _PRE:
        pre = argparse.ArgumentParser(add_help=False, exit_on_error=False)
        pre.add_argument("--config")
        pre.add_argument("--no-server", action="store_true")
        pre.add_argument("--version", action="store_true")
        pre.add_argument("-h", "--help", action="store_true")
        pre.add_argument("command", nargs="?")
        pre.add_argument("rest", nargs=argparse.REMAINDER)
        _PRE.append(pre)  # once per process, as the parser (the server reads every call)
    pre = _PRE[0]
    try:
        known, unknown = pre.parse_known_args(argv)
    except argparse.ArgumentError:
        return None
    if known.version or unknown:
        return None
    return known.config, known.command, known.help


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    A built-in command is parsed and run without loading any plugin. Any other word, help,
    or no command at all loads the plugins once, for the commands they offer.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    word = _command_word(argv)
    if word is None or (word[1] in HANDLERS and not word[2]):
        parser = _parser()
        return _builtin(parser, parser.parse_args(argv))
    return _with_plugins(argv, word[0], word[1])


def _builtin(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    import importlib

    if args.command not in HANDLERS:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    module, name = HANDLERS[args.command]
    handler = getattr(importlib.import_module(f".{module}", __package__), name)
    status: int = handler(args, parser)
    return status


def _with_plugins(argv: list[str], config: str | None, word: str | None) -> int:
    """Parse and run with the plugins' commands added (only the named one's options)."""
    from ..errors import PluginError, StockadeError
    from ..frontends import CliCommand, CliContext
    from .common import report_error

    parser, commands = _build()
    offered: dict[str, CliCommand] = {}
    try:
        cli = CliContext.load(config, os.environ)
        offered = cli.hooks.cli_commands(HANDLERS)
        for name, command in offered.items():
            sub = commands.add_parser(
                name, help=command.help, description=command.description or command.help
            )
            if name == word:
                command.arguments(sub, cli)
    except StockadeError as error:
        if word is not None:
            return report_error(error, as_json=False)
        print(f"stockade: plugin commands are not listed: {error.message}", file=sys.stderr)
    if word is not None and word not in offered and word in ELSEWHERE:
        from ..plugin.manager import DISABLE_ENV

        dist, what = ELSEWHERE[word]
        return report_error(
            PluginError(
                f"{what} not installed (or blocked)",
                hint=f"install the {dist} distribution: `pip install {dist}`, or `uv sync` in "
                f"the Stockade workspace; if it is installed, check plugins.disable and "
                f"{DISABLE_ENV}",
                details={"command": word, "distribution": dist},
            ),
            as_json=False,
        )
    args = parser.parse_args(argv)
    if args.command not in offered:
        return _builtin(parser, args)
    try:
        status = offered[args.command].handler(args, cli)
    except StockadeError as error:
        return report_error(error, as_json=getattr(args, "json", False) is True)
    return status


def entry() -> None:
    """Console-script entry point.

    A reader that closes the pipe early (``stockade run --json ... | head``) ends Stockade
    the way it ends any filter: exit status 141 (128 + SIGPIPE), no traceback. Whatever was
    still buffered for stdout is dropped rather than written at exit.
    """
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(EXIT_BROKEN_PIPE) from None
    raise SystemExit(status)
