"""Deciding one command: its class, its writable roots, a caller's gate, the policy's decision
(and a person's answer when it asks), and what its egress proxy may let through.

Plain functions of their inputs: the host calls them in order (:meth:`stockade.host.Host.admit`)
and records what they decide through :class:`~stockade.record.recording.Recording`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ..errors import PolicyDenied, PolicyHeld, UnsafeRoot
from ..request.result import PendingApproval
from ..request.step import EgressRule
from ..request.verdict import Classification, Decision

if TYPE_CHECKING:
    from ..config.schema import Config
    from ..plugin.manager import Hooks
    from ..record.recording import Recording
    from ..request.literals import ClassifierRule
    from ..request.spec import ExecSpec, Profile

UNCLASSIFIED = Classification(
    "writes", ("no classifier is installed, so every command counts as writes",), by=("host",)
)


def classify(hooks: Hooks, rules: Mapping[str, ClassifierRule], spec: ExecSpec) -> Classification:
    """Every classifier votes; the most severe kind wins and all reasons are kept."""
    votes = hooks.classify(spec, rules)
    if not votes:
        return UNCLASSIFIED
    worst = max(votes, key=lambda vote: vote.severity)
    return Classification(
        worst.kind,
        tuple(reason for vote in votes for reason in vote.reasons),
        by=tuple(name for vote in votes for name in vote.by),
        programs=tuple(dict.fromkeys(p for vote in votes for p in vote.programs)),
        parts=next((vote.parts for vote in votes if vote.parts), ()),
    )


def check_roots(
    spec: ExecSpec, config: Config, environ: Mapping[str, str], recording: Recording
) -> None:
    """Refuse, recorded, a command whose writable roots break :mod:`stockade.confine.roots`.

    Raises:
        UnsafeRoot: a writable root it would get is a home, a system folder, the store, ...
    """
    from ..confine.roots import check_spec

    try:
        check_spec(spec, config, environ)
    except UnsafeRoot as error:
        recording.error(spec, error)
        raise


def gate(
    spec: ExecSpec, classification: Classification, decision: Decision, recording: Recording
) -> None:
    """A caller's gate in front of the policy: recorded; a ``deny`` refuses here.

    Raises:
        PolicyDenied: the gate denies the command.
    """
    recording.gate(spec, classification, decision)
    if decision.verdict == "deny":
        raise PolicyDenied(
            f"refused by {decision.by or 'a gate'}: {decision.reason}",
            details={"action_id": spec.action_id, "kind": classification.kind, "gate": True},
        )


def decide(
    hooks: Hooks,
    spec: ExecSpec,
    classification: Classification,
    profile: Profile,
    *,
    recording: Recording,
    hold: Callable[[PendingApproval], object],
    breaker: Decision | None = None,
) -> Decision:
    """The policy's decision, a person's answer when it asks; recorded, then enforced. In a
    :meth:`~stockade.record.recording.Recording.batch`, what it kept is stored before a
    person is asked and before the step is held.

    ``breaker`` is the breaker's ``ask`` (:mod:`stockade.policy.breaker`): it replaces an
    ``allow`` or an ``ask`` of the policy (a ``deny`` stays), and no approval in advance
    answers it: a person does, or it is held.

    Raises:
        PolicyDenied: the command is denied.
        PolicyHeld: the command needs a person and none answered; ``hold`` kept it as step
            ``spec.step`` of run ``spec.run_id`` for ``stockade approve``.
    """
    decision = hooks.decide(spec, classification, profile) or Decision(
        "deny", "no policy plugin is loaded (the built-in one is blocked)", by="host"
    )
    if breaker is not None and decision.verdict != "deny":
        also = f"; the policy asks too: {decision.reason}" if decision.verdict == "ask" else ""
        decision = Decision("ask", breaker.reason + also, by=breaker.by)
    if spec.grant_writable and decision.verdict == "allow":
        # A widening is never the policy's to give: a person grants it, or nobody.
        decision = Decision(
            "ask",
            f"it asks for a one-shot grant: {', '.join(spec.grant_writable)} writable",
            by=decision.by,
        )
    if decision.verdict == "ask":
        if spec.preapproved and spec.origin != "mcp" and breaker is None:
            decision = Decision(
                "allow", f"approved in advance: {decision.reason}", by="preapproved"
            )
        else:
            recording.flush()  # what is known of it is stored before a person is asked
            decision = hooks.ask(PendingApproval(spec, classification, decision)) or decision
    recording.permission(spec, classification, decision)
    if decision.verdict == "deny":
        raise PolicyDenied(
            f"denied by {decision.by or 'policy'}: {decision.reason}",
            details={"action_id": spec.action_id, "kind": classification.kind},
        )
    if decision.verdict == "ask":
        recording.flush()  # a held step's action is stored before the step is
        hold(PendingApproval(spec, classification, decision))
        raise held_error(spec, classification, decision)
    return decision


def held_error(spec: ExecSpec, classification: Classification, decision: Decision) -> PolicyHeld:
    """The error that says ``spec`` waits for a person, and how a person answers."""
    run, step = spec.run_id, spec.step
    return PolicyHeld(
        f"held for a person's approval as step {step} of run {run}: {decision.reason}",
        hint=f"a person runs it with `stockade approve {run} {step}` or refuses it "
        f"with `stockade decline {run} {step}`; `stockade pending` lists what waits",
        details={
            "action_id": spec.action_id,
            "kind": classification.kind,
            "run_id": run,
            "step": step,
            "argv": list(spec.argv),
        },
    )


def egress_rule(
    spec: ExecSpec,
    classification: Classification,
    profile: Profile,
    config: Config,
    over_breaker: bool = False,  # noqa: FBT001, FBT002 - the rule's own field
) -> EgressRule | None:
    """What a ``network`` command's proxy may let through: its profile's hosts (and
    ``over_breaker``: a person approved it over the breaker's ask). ``None`` (no network at
    all) for any other command, for a profile that names no hosts, and for
    ``danger-full-access`` (which is not confined)."""
    if classification.kind != "network" or spec.mode == "danger-full-access":
        return None
    if not profile.hosts:
        return None
    from .credentials import bound

    return EgressRule(
        profile.hosts,
        resolve=config.network.resolve,
        credentials=bound(profile, spec),
        upstream_ca=config.network.upstream_ca,
        over_breaker=over_breaker,
    )
