"""``stockade workspace NAME [--clear]``: where a workspace is, how big; emptying it."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..errors import StockadeError, UsageError
from .common import make_host, report_error

if TYPE_CHECKING:
    import argparse


def workspace_command(args: argparse.Namespace, _parser: object = None) -> int:
    """Print the workspace's path and size; with ``--clear``, empty it and record who did."""
    from ..policy.prompt import user_name
    from ..workspace.folders import Locks, clear, clear_caches, usage, workspace_of

    try:
        with make_host(args) as host:
            profile = host.config.profile(args.name)
            folder = workspace_of(host.config, profile)
            if folder is None:
                raise UsageError(
                    f"agent {args.name!r} has no workspace of its own: it works in the "
                    "current directory",
                    hint=f"configure [agents.{args.name}] in {host.config.named} to give "
                    "an agent a workspace",
                )
            removed = None
            if args.clear:
                by = user_name()
                with Locks(host.config, f"(cleared by {by})").hold(folder):
                    removed = clear(folder) + clear_caches(host.config, args.name)
                if host.hooks.has_recorder():
                    from ..record.events import WorkspaceEvent
                    from ..request.spec import new_action_id

                    event = WorkspaceEvent(
                        new_action_id(), agent=args.name, path=folder, action="clear",
                        by=by, removed=removed,
                    )  # fmt: skip
                    host.hooks.record(event)
            size, files = usage(folder)
    except StockadeError as error:
        return report_error(error, as_json=args.json)
    if args.json:
        import json

        report = {"agent": args.name, "path": folder, "bytes": size, "files": files}
        if removed is not None:
            report["removed"] = removed
        print(json.dumps(report, indent=2))
        return 0
    if removed is not None:
        print(f"stockade: cleared {removed} entries", file=sys.stderr)
    from ..display import quote

    print(f"{quote(folder)}  {files} files, {size} bytes")
    return 0
