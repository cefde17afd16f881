"""A held step on its way back: whether it may run now, and the home it runs in.

A step a person approved runs exactly as it was shown, once; one that already ran gives back
its result; one still waiting or declined is refused with what to do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ..errors import PolicyDenied, PolicyHeld, UsageError

if TYPE_CHECKING:
    from ..record.store import HeldStep, Store
    from ..request.result import RunResult
    from ..request.spec import ExecSpec


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
