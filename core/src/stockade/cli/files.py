"""``stockade file list|read|write``: the file tools on an agent's workspace, from the CLI."""

from __future__ import annotations

import functools
import os
import sys
from typing import TYPE_CHECKING

from .. import resolved
from ..errors import StockadeError
from .common import report_error

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from ..config.schema import Config
    from ..request.spec import Profile
    from ..workspace.file_types import WriteResult
    from ..workspace.files import Workspace


def _root(args: argparse.Namespace) -> tuple[str, int | None, Callable[[str], None] | None]:
    """The agent profile's workspace (else the current directory), its quota, and the check
    a read not granted private data (``--read-private``) makes again of the file it opened;
    such a read of private data is refused here, before anything is read.

    Raises:
        PolicyDenied: the read names private data.
    """
    from ..config.load import load_config
    from ..workspace.folders import workspace_of

    config = load_config(args.config, environ=os.environ)
    profile = config.profile(args.profile)
    root = workspace_of(config, profile) or os.getcwd()
    check = None
    if args.tool == "read" and not getattr(args, "read_private", False):
        _refuse_private(config, profile, root, args.path)
        check = functools.partial(_refuse_private, config, profile, root)
    return root, profile.quota_mb, check


def _refuse_private(config: Config, profile: Profile, root: str, path: str) -> None:
    from ..policy.private import find, refuse_read
    from ..record.store import open_store
    from ..record.taint import PrivateFiles

    real = resolved.realpath(root)
    store = open_store(config)
    try:
        marked = PrivateFiles(store).named(real, [""])
    finally:
        store.close()
    if profile.private or marked:
        refuse_read(real, path, find(real, profile.private, marked))


def file_command(args: argparse.Namespace, _parser: object = None) -> int:
    """Run one file tool and print its result (JSON with ``--json``)."""
    from ..workspace.file_types import WriteResult
    from ..workspace.files import Workspace

    try:
        root, quota_mb, check = _root(args)
        if getattr(args, "view", None):
            result = _viewed(args, root)
            _taint(args, root, None)
        else:
            with Workspace(root, quota_mb=quota_mb) as workspace:
                result = _tool(args, workspace, check)
            _taint(args, root, result if isinstance(result, WriteResult) else None)
    except StockadeError as error:
        return report_error(error, as_json=args.json)
    if args.json:
        from ..request.wire import to_json

        print(to_json(result, indent=2))
        return 0
    _print(args.tool, result)
    return 0


def _tool(
    args: argparse.Namespace, workspace: Workspace, check: Callable[[str], None] | None
) -> object:
    if args.tool == "list":
        return workspace.file_list(args.path)
    if args.tool == "read":
        return workspace.file_read(args.path, offset=args.offset, limit=args.limit, check=check)
    return workspace.file_write(args.path, sys.stdin.buffer.read())


def _viewed(args: argparse.Namespace, root: str) -> object:
    """``list`` or ``read`` in the view of running command ``--view`` (its layer)."""
    from ..config.load import load_config
    from ..config.schema import store_folder
    from ..layers.view import of_command

    view = of_command(store_folder(load_config(args.config, environ=os.environ)), args.view, root)
    if args.tool == "list":
        return view.file_list(args.path)
    return view.file_read(args.path, offset=args.offset, limit=args.limit)


def _taint(args: argparse.Namespace, root: str, written: WriteResult | None) -> None:
    """What the tool did to the taint of its run (``--run`` / ``STOCKADE_RUN``), recorded
    before anything it read is shown; without a run there is nothing to taint."""
    from .common import run_name

    run = run_name(args)
    if run is None:
        return
    from ..host import Host

    with Host.from_environment(args.config, environ=os.environ) as warm:
        host = warm.for_run(run_id=run)
        host.breaker.file_tool(
            args.tool, root, args.path, warm.config.profile(args.profile), written=written
        )
        host.close()


def _print(tool: str, result: object) -> None:
    """A tool's result for a person: names as shell words, hidden characters escaped, and
    file text escaped too when stdout is a terminal (exact when piped)."""
    from ..display import quote, visible
    from ..workspace.file_types import Listing, ReadResult, WriteResult

    if isinstance(result, Listing):
        for entry in result.entries:
            print(f"{visible(entry.kind):<8} {entry.size:>12}  {quote(entry.name)}")
        if result.truncated:
            print("stockade: more entries than the limit; not all are listed", file=sys.stderr)
    elif isinstance(result, ReadResult):
        if result.text is not None:
            tty = sys.stdout.isatty()
            sys.stdout.write(visible(result.text, keep="\n\t") if tty else result.text)
        else:
            print(visible(result.description or ""))
        if result.truncated:
            more = result.offset + result.returned
            print(f"stockade: more follows; read on with --offset {more}", file=sys.stderr)
    elif isinstance(result, WriteResult):
        what = "created" if result.created else ("changed" if result.changed else "unchanged")
        print(f"{what}: {quote(result.path)} ({result.old_size} -> {result.new_size} bytes)")
