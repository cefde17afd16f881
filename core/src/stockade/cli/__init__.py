"""The ``stockade`` command line, split by command group; each group imports only what it uses.

Exit status: the command's own; 128+N when killed by signal N; 124 when timed out; 130 when
interrupted; 125 for Stockade's own errors (usage, config, sandbox unavailable); 126 denied or
held by policy, or the program could not be started; 127 program not found. ``approve``
exits with the status of the command it ran.
"""

from __future__ import annotations

import argparse
import os
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
        raise SystemExit(EXIT_USAGE)


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
        if tool == "read":
            sub.add_argument("--offset", type=int, default=0, metavar="BYTES")
            sub.add_argument("--limit", type=int, default=256 * 1024, metavar="BYTES")


def _add_skill_commands(commands: Any) -> None:  # noqa: ANN401 - argparse's subparsers action
    """``stockade skill list|show|run``."""
    skill = commands.add_parser(
        "skill", help="list, read or run Agent Skills (needs stockade-skills)"
    )
    tools = skill.add_subparsers(dest="tool", metavar="TOOL", parser_class=_Parser, required=True)
    listing = tools.add_parser("list", help="the skills found, with any problems in them")
    show = tools.add_parser("show", help="a skill's instructions, or one of its resources")
    show.add_argument("name", metavar="SKILL")
    show.add_argument("resource", metavar="RESOURCE", nargs="?")
    show.add_argument("--offset", type=int, default=0, metavar="CHARS")
    show.add_argument("--max-chars", type=int, default=None, metavar="CHARS")
    run = tools.add_parser(
        "run",
        help="run a skill's script behind the double-safety gate, in the sandbox",
        description="Run SCRIPT (under scripts/) of SKILL with ARGS. It runs only when the "
        "global safety is off (--unsafe or [skills] safe_mode = false), the skill declares "
        "safe_mode: false, and the agent may run the script's interpreter.",
    )
    run.add_argument("name", metavar="SKILL")
    run.add_argument("resource", metavar="SCRIPT")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARG")
    run.add_argument("--timeout", type=float, default=None, metavar="SECONDS")
    run.add_argument(
        "--unsafe", action="store_true", help="turn the global safety off for this invocation"
    )
    run.add_argument("--yes", action="store_true", help="approve in advance what would ask")
    for sub in (listing, show, run):
        sub.add_argument("--profile", "--agent", metavar="AGENT", default="default")
        sub.add_argument("--json", action="store_true")


def _add_servers(commands: Any) -> None:  # noqa: ANN401 - argparse's subparsers action
    """``stockade mcp`` and ``stockade ui``."""
    mcp = commands.add_parser(
        "mcp",
        help="serve an agent's tools over MCP on stdio (needs stockade-mcp)",
        description="Serve run_command, background tasks and the file tools over MCP "
        "(stdio) for one agent profile, until the client leaves.",
    )
    mcp.add_argument(
        "--agent",
        "--profile",
        dest="profile",
        metavar="AGENT",
        default="default",
        help="agent profile of every command",
    )
    mcp.add_argument(
        "--unsafe-skills",
        action="store_true",
        help="turn the global safety of skill scripts off (the skill tool's gate)",
    )

    ui = commands.add_parser(
        "ui",
        help="serve the run page on loopback (needs stockade-ui)",
        description="Serve a local web view of runs, where a person lets held commands go "
        "ahead or declines them. Loopback only; the URL to open carries a per-start token.",
    )
    ui.add_argument("--port", type=int, default=0, metavar="N", help="port (default: any free)")
    ui.add_argument("--no-open", action="store_true", help="do not open a browser")


def build_parser() -> argparse.ArgumentParser:
    """The parser for every command (handlers are imported only when chosen)."""
    parser = _Parser(prog="stockade", description="Run an agent's commands, confined and bounded.")
    parser.add_argument("--version", action="version", version=f"stockade {__version__}")
    parser.add_argument("--config", metavar="PATH", help="config file (else STOCKADE_CONFIG)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = commands.add_parser(
        "run",
        help="run one command",
        description="Run one command by argv: classified, approved, confined, bounded.",
    )
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
    run.add_argument("--json", action="store_true", help="print the result as JSON")
    run.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARG...]")

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

    _add_skill_commands(commands)
    _add_servers(commands)

    plugins = commands.add_parser("plugins", help="list the installed plugins")
    plugins.add_argument("--json", action="store_true")
    doctor = commands.add_parser("doctor", help="say what works on this machine and why not")
    doctor.add_argument("--json", action="store_true")
    return parser


# command -> (module, handler); each module is imported only when its command is chosen.
HANDLERS: dict[str, tuple[str, str]] = {
    "run": ("run", "run_command"),
    "classify": ("classify", "classify_command"),
    "pending": ("approve", "pending_command"),
    "approve": ("approve", "approve_command"),
    "decline": ("approve", "decline_command"),
    "file": ("files", "file_command"),
    "workspace": ("workspace", "workspace_command"),
    "log": ("record", "log_command"),
    "show": ("record", "show_command"),
    "replay": ("record", "replay_command"),
    "verify": ("record", "verify_command"),
    "mcp": ("mcp", "mcp_command"),
    "skill": ("skill", "skill_command"),
    "ui": ("ui", "ui_command"),
    "plugins": ("plugins", "plugins_command"),
    "doctor": ("doctor", "doctor_command"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    import importlib

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command not in HANDLERS:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    module, name = HANDLERS[args.command]
    handler = getattr(importlib.import_module(f".{module}", __name__), name)
    status: int = handler(args, parser)
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
