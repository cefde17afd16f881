"""What the command groups share: building a host and reporting errors."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..errors import StockadeError, UsageError

if TYPE_CHECKING:
    import argparse

    from ..host import Host


RUN_ENV = "STOCKADE_RUN"
_RUN_NAME = "[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"


def run_name(args: argparse.Namespace, default: str | None = None) -> str | None:
    """The run that spans calls this command belongs to: ``--run``, else ``STOCKADE_RUN``,
    else ``default`` (``None``: a run of its own).

    Raises:
        UsageError: the name is not letters, digits and ``_.-`` (at most 64).
    """
    import re

    from ..caller import environ

    name = getattr(args, "run_name", None) or environ().get(RUN_ENV) or default
    if name is not None and not re.fullmatch(_RUN_NAME, name):
        raise UsageError(
            f"invalid run name {name!r}",
            hint="letters, digits and '_.-', starting with a letter or digit, at most 64",
        )
    return name


def make_host(args: argparse.Namespace, *, run: str | None = None, warn: bool = True) -> Host:
    """A host from ``--config`` / ``STOCKADE_CONFIG`` / the XDG config and the environment;
    inside the server, a run on a warm host for the caller: its own, or the kept run
    ``run`` (a run that spans calls).

    With ``warn``, each installed plugin that failed to load (and was skipped) is named in
    one line on stderr (``stockade plugins`` and ``doctor`` report them themselves).

    Raises:
        UsageError: ``run`` is named, but this is not the server (a process of its own
            forgets everything when it exits).
    """
    from ..caller import current

    caller = current()
    if caller is not None:
        return _warned(caller.host(args.config, run), warn=warn)
    if run is not None:
        raise UsageError(
            f"run {run!r} spans calls, and only the warm server keeps it between them",
            hint="let the command line use the server (drop --no-server and "
            "STOCKADE_NO_SERVER), or leave out --run and STOCKADE_RUN",
        )
    from ..host import Host

    return _warned(Host.from_environment(args.config, environ=os.environ), warn=warn)


def _warned(host: Host, *, warn: bool) -> Host:
    if warn:
        from ..display import visible

        for plugin in host.hooks.broken():
            print(f"stockade: skipped {visible(plugin.message())}", file=sys.stderr)
    return host


@contextlib.contextmanager
def interrupts(stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` on SIGINT, SIGTERM or SIGHUP of this process, or, inside the server,
    when the caller is interrupted (its Ctrl-C, or it went away)."""
    from ..caller import current

    caller = current()
    if caller is not None:
        remove = caller.on_interrupt(stop)
        try:
            yield
        finally:
            remove()
        return
    import signal

    previous = {
        sig: signal.signal(sig, lambda *_: stop())
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_CLI_WORDS = {"list_commands shows": "`stockade tasks` shows"}
"""The MCP tools a shared hint names, as the command line says them."""


def report_error(error: StockadeError, *, as_json: bool) -> int:
    """Print ``error`` for a person (stderr) or a program (JSON on stdout); its exit status.
    A hint that names an MCP tool names the command instead."""
    for tool, command in _CLI_WORDS.items():
        if error.hint and tool in error.hint:
            error.hint = error.hint.replace(tool, command)
    if as_json:
        import json

        print(json.dumps({"error": error.to_dict()}, indent=2, sort_keys=True))
    else:
        from ..display import visible

        print(f"stockade: error[{error.code}]: {visible(error.message)}", file=sys.stderr)
        if error.hint:
            print(f"  hint: {visible(error.hint)}", file=sys.stderr)
    return error.exit_status
