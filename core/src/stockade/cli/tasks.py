"""``stockade start|read|kill|tasks``: background tasks at the command line.

A task outlives the call that started it, so it lives in the warm server, in a run kept
across calls (``--run RUN`` / ``STOCKADE_RUN``; ``cli`` when none is named). The run is also
the tasks' owner: ``stockade tasks`` lists the run's, and another run's ID is unknown here,
as another owner's is through the API. In a process of its own (``--no-server``) these
commands refuse, saying why.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from ..errors import StockadeError
from .common import interrupts, make_host, report_error, run_name

if TYPE_CHECKING:
    import argparse

    from ..host import Host
    from ..run.tasks import TaskInfo

DEFAULT_RUN = "cli"
"""The run (and owner) of tasks started with no run named."""

FOLLOW_EVERY = 0.1
"""Seconds between two reads of ``read --follow``."""


def _host(args: argparse.Namespace) -> tuple[Host, str]:
    run = run_name(args, DEFAULT_RUN)
    assert run is not None  # noqa: S101 - a default was given
    return make_host(args, run=run), run


def start_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Start the command after ``--`` in the background; print its task id."""
    from .run import request_of

    try:
        request = request_of(args, parser)
        host, run = _host(args)
        info = host.start(request, owner=run)
    except StockadeError as error:
        return report_error(error, as_json=args.json)
    except (TypeError, ValueError) as error:
        from ..errors import UsageError

        return report_error(UsageError(str(error)), as_json=args.json)
    if args.json:
        _json(info)
    else:
        print(info.task_id)
    return 0


def read_command(args: argparse.Namespace, _parser: object = None) -> int:
    """Print what task ``ID`` printed since the last read; with ``--follow``, until it ends.
    Exits with the task's status once it has ended, else 0."""
    from .run import exit_status

    stop = [False]
    try:
        host, run = _host(args)
        with interrupts(lambda: stop.__setitem__(0, True)):
            while True:
                output = host.read_output(args.task, owner=run)
                if args.json:
                    from ..request.wire import to_json

                    print(to_json(output, indent=2))
                else:
                    sys.stdout.write(output.stdout)
                    sys.stdout.flush()
                    sys.stderr.write(output.stderr)
                if output.status != "running" or not args.follow or stop[0]:
                    break
                time.sleep(FOLLOW_EVERY)
    except StockadeError as error:
        return report_error(error, as_json=args.json)
    result = output.info.result
    return exit_status(result) if result is not None and output.status != "running" else 0


def kill_command(args: argparse.Namespace, _parser: object = None) -> int:
    """Kill task ``ID`` and everything it started; print what became of it."""
    try:
        host, run = _host(args)
        info = host.kill(args.task, owner=run)
    except StockadeError as error:
        return report_error(error, as_json=args.json)
    if args.json:
        _json(info)
    else:
        print(f"{info.task_id} {info.status}")
    return 0


def tasks_command(args: argparse.Namespace, _parser: object = None) -> int:
    """List the run's tasks, oldest first."""
    try:
        host, run = _host(args)
        infos = host.list_tasks(owner=run)
    except StockadeError as error:
        return report_error(error, as_json=args.json)
    if args.json:
        from ..request.wire import to_json

        print(to_json(infos, indent=2))
        return 0
    from ..display import quote

    for info in infos:
        status = info.status if info.exit_code is None else f"{info.status} ({info.exit_code})"
        argv = " ".join(quote(arg) for arg in info.argv)
        print(f"{info.task_id}\t{status}\t{info.action_id or '-'}\t{argv}")
    return 0


def _json(info: TaskInfo) -> None:
    from ..request.wire import to_json

    print(to_json(info, indent=2))
