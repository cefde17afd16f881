"""``stockade pending``, ``approve`` and ``decline``: a person answers for held steps."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..errors import StockadeError
from .common import interrupts, make_host, report_error

if TYPE_CHECKING:
    import argparse

    from ..record.store import HeldStep


def pending_command(args: argparse.Namespace, _parser: object = None) -> int:
    """List the steps waiting for a person, oldest first."""
    from ..config.schema import store_folder
    from ..layers.waiting import entries

    try:
        with make_host(args) as host:
            waiting = host.store.waiting()
            landings = len(entries(store_folder(host.config)))
    except StockadeError as error:
        return report_error(error, as_json=args.json)
    if landings and not args.json:
        print(f"{landings} command(s) ran and wait to land: `stockade land`", file=sys.stderr)
    if args.json:
        from ..request.wire import to_json

        print(to_json([_summary(held) for held in waiting], indent=2))
        return 0
    if not waiting:
        print("nothing waits for a person", file=sys.stderr)
    for held in waiting:
        print(_show(held))
    return 0


def approve_command(args: argparse.Namespace, _parser: object = None) -> int:
    """Approve the held step ``RUN STEP`` and run it, exactly as it was shown."""
    return answer_command(args, approve=True)


def decline_command(args: argparse.Namespace, _parser: object = None) -> int:
    """Decline the held step ``RUN STEP``: it never runs."""
    return answer_command(args, approve=False)


def answer_command(args: argparse.Namespace, *, approve: bool) -> int:
    """Approve (and run, exactly as shown) or decline the held step ``RUN STEP``."""
    from ..policy.prompt import user_name
    from ..run.executor import AbortToken
    from .run import exit_status, print_result

    verb = "ui" if getattr(args, "via", "cli") == "ui" else "approve" if approve else "decline"
    by = f"{user_name()} (stockade {verb})"
    try:
        with make_host(args) as host:
            held = host.answer(args.run, args.step, approve=approve, by=by)
            print(f"stockade: {held.state} by {by}:\n{_show(held)}", file=sys.stderr)
            if not approve:
                return 0
            abort = AbortToken()  # Ctrl-C kills the command, and the record says so
            with interrupts(abort.abort):
                result = host.resume(args.run, args.step, abort=abort)
    except StockadeError as error:
        return report_error(error, as_json=args.json)
    print_result(result, as_json=args.json)
    return exit_status(result)


def _summary(held: HeldStep) -> dict[str, object]:
    return {
        "run_id": held.run_id,
        "step": held.step,
        "state": held.state,
        "created": held.created,
        "argv": list(held.spec.argv),
        "cwd": held.spec.cwd,
        "mode": held.spec.mode,
        "profile": held.spec.profile,
        "classification": held.classification,
        "decision": held.decision,
    }


def _show(held: HeldStep) -> str:
    from ..display import visible
    from ..policy.prompt import describe
    from ..request.result import PendingApproval

    pending = PendingApproval(held.spec, held.classification, held.decision)
    head = f"{visible(held.run_id)} {held.step} ({visible(held.spec.profile)})"
    return f"{head}\n{describe(pending)}"


def land_command(args: argparse.Namespace, _parser: object = None) -> int:
    """List the commands whose writes wait for a person (``commit = "ask"``); with ACTION,
    land its writes (or, ``--refuse``, discard them), recorded as this user's answer."""
    from ..config.schema import store_folder
    from ..layers import waiting
    from ..policy.prompt import change_lines, user_name
    from ..request.wire import to_json

    try:
        with make_host(args) as host:
            store = store_folder(host.config)
            if args.action is None:
                found = [(entry, waiting.preview(entry)) for entry in waiting.entries(store)]
                if args.json:
                    listed = [{"action_id": e.action_id, "changes": c} for e, c in found]
                    print(to_json(listed, indent=2))
                elif not found:
                    print("no command's writes wait for a person", file=sys.stderr)
                for entry, changes in [] if args.json else found:
                    print("\n".join([entry.action_id, *change_lines(changes)]))
                return 0
            by = f"{user_name()} (stockade land)"
            verb = "refused" if args.refuse else "landed"
            event, _ = waiting.settle(
                store, args.action, land_it=not args.refuse, by=by, reason=f"{verb} by {by}"
            )
            host.recording.record(event)
    except StockadeError as error:
        return report_error(error, as_json=args.json)
    if args.json:
        print(to_json(event, indent=2))
        return 0
    from ..display import quote, visible

    print(f"stockade: {verb} the writes of {visible(event.action_id)} ({by})", file=sys.stderr)
    for path in event.quarantined:
        print(f"stockade: quarantined {quote(path)}: a protected name", file=sys.stderr)
    for failure in event.failed:
        print(f"stockade: {visible(failure)}", file=sys.stderr)
    return 0
