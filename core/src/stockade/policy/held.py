"""A held step on its way back: whether it may run now, and the home it runs in.

A step a person approved runs exactly as it was shown, once; one that already ran gives back
its result; one still waiting or declined is refused with what to do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ..errors import PolicyDenied, PolicyHeld, UsageError

if TYPE_CHECKING:
    from ..record.recording import Recording
    from ..record.store import HeldStep, Store
    from ..request.result import RunResult
    from ..request.spec import ExecSpec, Profile
    from .breaker import Breaker


def settled(held: HeldStep) -> RunResult | None:
    """The result of a step that already ran; ``None`` for one that may run now.

    Raises:
        PolicyHeld: nobody has answered yet.
        PolicyDenied: a person declined it.
    """
    names = {"run_id": held.run_id, "step": held.step}
    if held.state == "held":
        raise PolicyHeld(
            f"step {held.step} of run {held.run_id} still waits for a person",
            hint=f"`stockade approve {held.run_id} {held.step}`",
            details=names,
        )
    if held.state == "declined":
        raise PolicyDenied(f"declined by {held.answered_by}", details=names)
    if held.state == "done" and held.outcome is not None:
        from ..request.result import RunResult
        from ..request.wire import from_json

        return from_json(held.outcome, RunResult)
    return None


def claim(store: Store, found: HeldStep) -> None:
    """Take an approved step to run it, in this process only.

    Raises:
        UsageError: it is running, or ran, in another process.
    """
    run_id, step = found.run_id, found.step
    if found.state in ("failed", "done") or not store.claim(run_id, step):
        raise UsageError(
            f"step {step} of run {run_id} is {store.get(run_id, step).state}: it is "
            "running, or ran, in another process",
            details={"run_id": run_id, "step": step},
        )


def rehome(spec: ExecSpec, home: str | None) -> ExecSpec:
    """A held step runs in the home of the run that releases it: the home it was shown with
    went away with its own run."""
    if spec.home is None or home is None:
        return spec
    env = dict(spec.env)
    if env.get("HOME") == spec.home:
        env["HOME"] = home
    return attrs.evolve(spec, home=home, env=env)


def decide_again(
    found: HeldStep, profile: Profile, breaker: Breaker, store: Store, recording: Recording
) -> None:
    """An approved step whose run came to hold private data and somebody else's words after
    it was shown waits again, asked now by the breaker (what it was shown for kept after).

    Raises:
        PolicyHeld: it waits again for a person.
    """
    from ..request.verdict import Decision
    from .breaker import BY
    from .decide import held_error

    if found.state != "approved" or found.decision.by == BY:
        return
    tripped = breaker.check(found.spec, found.classification, profile)
    if tripped is None:
        return
    shown = found.decision.reason
    decision = Decision("ask", f"{tripped.reason}; it was shown for: {shown}", by=BY)
    if store.hold_again(found.spec.run_id, found.step, decision):
        recording.permission(found.spec, found.classification, decision)
        raise held_error(found.spec, found.classification, decision)
