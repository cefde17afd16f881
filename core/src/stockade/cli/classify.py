"""``stockade classify``: the class of a command and every classifier's reason; runs nothing."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import StockadeError, UsageError
from .common import report_error

if TYPE_CHECKING:
    import argparse


def classify_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Print the class of the argv after ``--`` (JSON with ``--json``); exit 0."""
    from ..host import Host
    from ..policy.resolve import resolve
    from ..request.spec import ExecRequest

    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        parser.error("classify needs a program: stockade classify [--json] -- PROGRAM [ARG...]")
    try:
        request = ExecRequest(argv, mode="danger-full-access", origin="cli")
        with Host.from_environment(args.config, environ=os.environ) as host:
            spec = resolve(request, host.config, host.environ)
            classification = host.classify(spec)
    except StockadeError as error:
        return report_error(error, as_json=args.json)
    except (TypeError, ValueError) as error:
        return report_error(UsageError(str(error)), as_json=args.json)
    if args.json:
        from ..request.wire import to_json

        print(to_json(classification, indent=2))
    else:
        print(f"{classification.kind}: {'; '.join(classification.reasons)}")
    return 0
