"""``stockade run``: one command, by argv, through the whole host pipeline."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

from ..errors import RecorderFailed, StockadeError, UsageError
from .common import interrupts, make_host, report_error, run_name

if TYPE_CHECKING:
    import argparse

    from ..request.result import RunResult
    from ..request.spec import ExecRequest

EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130


def exit_status(result: RunResult) -> int:
    """The CLI's exit status for a result: 124 timed out, 130 aborted, 128+N signalled."""
    if result.timed_out:
        return EXIT_TIMEOUT
    if result.aborted:
        return EXIT_INTERRUPTED
    if result.signal is not None:
        return 128 + int(signal.Signals[result.signal])
    return result.exit_code if result.exit_code is not None else 1


def _parse_env(entries: list[str], option: str = "--env") -> dict[str, str]:
    env = {}
    for entry in entries:
        name, sep, value = entry.partition("=")
        if not sep or not name:
            raise UsageError(f"{option} takes NAME=VALUE, got {entry!r}")
        env[name] = value
    return env


def request_of(args: argparse.Namespace, parser: argparse.ArgumentParser) -> ExecRequest:
    """The request ``run`` and ``start`` make of their options and the argv after ``--``.

    Raises:
        UsageError: an ``--env`` or ``--secret`` entry is not ``NAME=VALUE``.
    """
    from ..request.spec import ExecRequest

    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        parser.error(
            f"{args.command} needs a program: stockade {args.command} [OPTIONS] -- PROGRAM [ARG...]"
        )
    return ExecRequest(
        argv,
        args.cwd,
        env=_parse_env(args.env),
        credentials=_parse_env(args.secret, "--secret"),
        timeout=args.timeout,
        mode=args.mode,
        sandbox=args.sandbox,
        memory_mb=args.memory_mb,
        origin="cli",
        profile=args.profile,
        preapproved=args.yes,
        grant_writable=args.grant_write,
        dry_run=args.dry_run,
        read_private=getattr(args, "read_private", False),
    )


def run_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run the command named after ``--``; print its output or its JSON result."""
    from ..run.executor import AbortToken

    abort = AbortToken()
    try:
        request = request_of(args, parser)
        host = make_host(args, run=run_name(args))
        with interrupts(abort.abort), host:
            result = host.run(request, abort=abort)
    except RecorderFailed as error:
        from ..request.result import RunResult

        if not isinstance(error.result, RunResult):
            return report_error(error, as_json=args.json)
        if args.json:  # one JSON document: the error, and the result it did not stop
            from ..request.wire import to_json

            document = {"error": error.to_dict(), "result": error.result}
            print(to_json(document, indent=2))
            return error.exit_status
        print_result(error.result, as_json=False)
        return report_error(error, as_json=False)
    except StockadeError as error:
        return report_error(error, as_json=args.json)
    except (TypeError, ValueError) as error:
        return report_error(UsageError(str(error)), as_json=args.json)
    if not args.json and args.cwd is None and result.cwd and not _same_dir(result.cwd):
        print(
            f"stockade: ran in {result.cwd} (the workspace of agent {args.profile})",
            file=sys.stderr,
        )
    print_result(result, as_json=args.json)
    return exit_status(result)


def _same_dir(path: str) -> bool:
    import os

    from ..caller import cwd

    try:
        return os.path.samefile(path, cwd())
    except OSError:
        return False


def landing_lines(result: RunResult) -> str:
    """What a person reads of a command whose layers did not land: why, and what they held
    (and would withhold, and keep aside); paths as shell words, hidden characters escaped."""
    from ..display import quote

    why = {
        "discarded": "nothing landed (a dry run, or commit = on-success and it failed)",
        "over-quota": "nothing landed: it would take the workspace past its quota",
        "refused": "nothing landed: a person refused its writes",
        "waiting": "its writes wait for a person (commit = ask): "
        f"`stockade land {result.action_id}` lands them, "
        f"`stockade land --refuse {result.action_id}` discards them",
    }[result.landed or "discarded"]
    lines = [f"stockade: {why}"]
    changes = result.changes
    if changes is not None:
        for label, paths in (
            ("create", changes.created),
            ("modify", changes.modified),
            ("delete", changes.deleted),
        ):
            lines += [f"stockade: would {label} {quote(path)}" for path in paths]
        if changes.truncated:
            lines.append(f"stockade: ... {changes.total} in all")
        lines += [
            f"stockade: would quarantine {quote(path)}: a protected name, it never lands"
            for path in changes.withheld
        ]
        lines += [
            f"stockade: would keep aside {quote(path)}: changed in the folder since it started"
            for path in changes.conflicts
        ]
    return "\n".join(lines)


def print_result(result: RunResult, *, as_json: bool) -> None:
    """The command's output on stdout and stderr, or the whole result as JSON."""
    if as_json:
        from ..request.wire import to_json

        print(to_json(result, indent=2))
        return
    sys.stdout.write(result.stdout.text)
    sys.stdout.flush()
    sys.stderr.write(result.stderr.text)
    if result.sandbox.enforcement == "partial":
        print(partial_line(result), file=sys.stderr)
    if result.landed not in (None, "landed"):
        print(landing_lines(result), file=sys.stderr)
    for refusal in result.refused:
        print(
            f"stockade: the egress proxy refused {refusal.method} {refusal.host}:{refusal.port}: "
            f"{refusal.reason}",
            file=sys.stderr,
        )
    for hidden in result.sandbox.hidden:
        from ..display import visible

        print(
            f"stockade: {visible(hidden.path)} is hidden inside the sandbox ({hidden.reason})",
            file=sys.stderr,
        )
    if result.timed_out:
        print(f"stockade: timed out after {result.timeout_s:g}s", file=sys.stderr)
    for path in result.quarantined:  # what the host did after the command, said plainly
        print(
            f"stockade: quarantined {path}: a protected name the command made or changed "
            "(`stockade replay` says where it went)",
            file=sys.stderr,
        )
    for path in result.restored:
        print(f"stockade: restored {path} as it was before the command", file=sys.stderr)


def partial_line(result: RunResult) -> str:
    """The stderr line of a run its sandbox confined only partly, naming what it left out."""
    from ..display import visible

    facts = result.sandbox
    missing = "; ".join(facts.missing) or "the provider did not say what"
    return visible(
        f"stockade: PARTIAL enforcement: sandbox {facts.provider} did not enforce all of "
        f"{facts.mode}; not enforced: {missing}"
    )
