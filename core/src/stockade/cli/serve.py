"""``stockade serve``: the warm server in the foreground, its status, or stopping it."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

IDLE_ENV = "STOCKADE_SERVER_IDLE"


def serve_command(args: argparse.Namespace, _parser: object = None) -> int:
    """Serve in the foreground, or ``--status``, or ``--stop``."""
    from ..server.paths import Place

    place = Place(os.environ)
    if args.status:
        return _status(place, as_json=args.json)
    if args.stop:
        from .client import NoServer, stop

        try:
            stopped = stop(place)
        except NoServer as why:
            print(f"stockade serve: {why}", file=sys.stderr)
            return 1
        if args.json:
            print(json.dumps({"stopped": stopped}))
        else:
            print("stockade serve: stopped" if stopped else "stockade serve: none was running")
        return 0
    from ..server.server import DEFAULT_IDLE, serve

    idle = args.idle_timeout
    if idle is None:
        idle = float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE)
    return serve(os.environ, idle=idle, warm=True)


def _status(place: object, *, as_json: bool) -> int:
    from ..server import protocol
    from ..server.paths import Place
    from .client import NoServer, connect

    assert isinstance(place, Place)  # noqa: S101 - the caller made it
    try:
        conn = connect(place, op="status", start=False)
    except NoServer as why:
        if as_json:
            print(json.dumps({"running": False, "why": str(why)}))
        else:
            print(f"stockade serve: not running ({why})")
        return 1
    try:
        status = protocol.receive(conn) or {}
    finally:
        conn.close()
    status.pop("type", None)
    if as_json:
        print(json.dumps({"running": True, **status}, indent=2, sort_keys=True))
        return 0
    print(
        f"stockade serve: running (pid {status.get('pid')}, {status.get('version')}) on "
        f"{status.get('socket')}\n  calls: {status.get('calls_running')} running, "
        f"{status.get('calls_served')} served; idle {status.get('idle_for')}s of "
        f"{status.get('idle_timeout')}s",
        file=sys.stdout,
    )
    return 0
