"""A held step on its way back: whether it may run now, and the home it runs in.

A step a person approved runs exactly as it was shown, once; one that already ran gives back
its result; one still waiting or declined is refused with what to do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import attrs

from ..errors import PolicyDenied, PolicyHeld, StockadeError, UsageError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..config.schema import Config
    from ..plugin.manager import Hooks
    from ..record.recording import Recording
    from ..record.store import HeldStep, Store
    from ..request.result import RunResult
    from ..request.spec import ExecSpec, Profile
    from ..request.verdict import Decision
    from .breaker import Breaker


T = TypeVar("T")


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


def kept(store: Store, found: HeldStep, work: Callable[[], T]) -> T:
    """``work()`` for a claimed step; an error it raises is kept as the step's outcome.

    Raises:
        StockadeError: what ``work`` raised, once kept.
    """
    from ..request.wire import to_json

    try:
        return work()
    except StockadeError as error:
        store.finish(found.run_id, found.step, outcome=to_json(error.to_dict()), failed=True)
        raise


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


def allowed(
    found: HeldStep,
    spec: ExecSpec,
    hooks: Hooks,
    config: Config,
    *,
    environ: Mapping[str, str],
    recording: Recording,
) -> tuple[Decision, dict[str, str]]:
    """An approved, claimed step's allow (recorded, as the person's) and its credentials,
    its writable roots checked again first (homes and the store may have moved since).

    Raises:
        UnsafeRoot: a writable root it would get is unsafe now (recorded).
        CredentialUnavailable: a broker no longer resolves a handle (recorded).
    """
    from ..request.verdict import Decision
    from . import credentials, decide

    decision = Decision("allow", f"approved: {found.decision.reason}", by=found.answered_by or "")
    decide.check_roots(spec, config, environ, recording)
    recording.permission(spec, found.classification, decision)
    try:
        return decision, credentials.secrets(hooks, spec, config)
    except StockadeError as error:
        recording.error(spec, error)  # its action was recorded when it was held
        raise


def answer(
    store: Store,
    recording: Recording,
    run_id: str,
    step: int,
    *,
    approve: bool,
    by: str,
    reason: str,
) -> HeldStep:
    """Record a person's answer to a held step (it runs on :meth:`Host.resume`).

    A decline is final at once and is a ``decline`` event in the record (``reason`` says
    how: ``declined``, ``cancelled``, ``expired``...); an approval is recorded as the
    ``permission`` event of :meth:`~stockade.host.Host.resume`.

    Raises:
        UsageError: no such step, or it was already answered.
        RecorderFailed: declined, but a recorder could not record it (it still never runs).
    """
    answered = store.answer(run_id, step, approve=approve, by=by)
    if not approve:
        recording.decline(answered.spec.action_id, by=by, reason=reason)
    return answered
