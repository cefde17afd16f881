"""The built-in policy: the agent profile decides, and every decision names its rule.

The rules, in order; the first that applies decides:

1. a ``read-only`` agent (``autonomy``) may run only ``reads`` commands;
2. a program not in the profile's ``programs`` is denied (every program the command would
   start counts: ``env rm`` starts ``rm``), and so is any program that resolves to a file in
   the workspace, which the agent can write: its name says nothing about what it does;
3. a run past its budget (``steps``, ``duration``) is denied;
4. ``destroys`` always asks a person; so does any class in the profile's ``ask``;
5. everything else is allowed.

It runs last (``trylast``), so an installed policy plugin decides first. ``ask`` is answered
by a person (the terminal prompt, ``stockade approve``); approving never widens the sandbox.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .. import hookimpl, resolved
from ..request.spec import ExecSpec, Profile
from ..request.verdict import Classification, Decision

NAME = "builtin-policy"

Rule = Callable[[ExecSpec, Classification, Profile], "Decision | None"]


@hookimpl(trylast=True)
def stockade_decide(spec: ExecSpec, classification: Classification, profile: Profile) -> Decision:
    """Allow, ask or deny ``spec`` under ``profile`` (see the module docstring)."""
    for rule in RULES:
        decision = rule(spec, classification, profile)
        if decision is not None:
            return decision
    kind = classification.kind
    return Decision(
        "allow", f"{kind} is not in {_where(profile)}.ask{_no_hosts(kind, profile)}", by=NAME
    )


def autonomy(spec: ExecSpec, classification: Classification, profile: Profile) -> Decision | None:
    """Rule 1: a read-only agent runs only ``reads`` commands."""
    if profile.autonomy == "read-only" and classification.kind != "reads":
        return _deny(
            f"{_where(profile)} is read-only (autonomy), and this command is classed "
            f"{classification.kind}"
        )
    return None


def programs(spec: ExecSpec, classification: Classification, profile: Profile) -> Decision | None:
    """Rule 2: only the profile's programs, installed outside the workspace."""
    if profile.programs is None:
        return None
    if _inside(spec.program, spec.workspace):
        return _deny(
            f"{spec.argv[0]} resolves to {spec.program}, inside the workspace, and "
            f"{_where(profile)}.programs names programs installed outside it"
        )
    allowed = set(profile.programs)
    for program in classification.programs or (os.path.basename(spec.argv[0]),):
        if program not in allowed:
            listed = ", ".join(profile.programs) or "none"
            return _deny(f"{program} is not in {_where(profile)}.programs ({listed})")
    return None


def budget(spec: ExecSpec, classification: Classification, profile: Profile) -> Decision | None:
    """Rule 3: nothing past the run's budget of steps and seconds."""
    steps, duration = profile.budget.steps, profile.budget.duration
    if steps is not None and spec.step > steps:
        return _deny(
            f"the run's budget is spent: this is step {spec.step} and "
            f"{_where(profile)}.budget.steps allows {steps}"
        )
    if duration is not None and spec.run_elapsed > duration:
        return _deny(
            f"the run's budget is spent: it has run {spec.run_elapsed:.0f}s and "
            f"{_where(profile)}.budget.duration allows {duration:g}s"
        )
    return None


def ask(spec: ExecSpec, classification: Classification, profile: Profile) -> Decision | None:
    """Rule 4: ``destroys`` and the profile's ``ask`` classes wait for a person."""
    kind = classification.kind
    if kind == "destroys":
        return Decision("ask", "destroys always waits for a person", by=NAME)
    if kind in profile.ask:
        return Decision(
            "ask", f"{kind} is in {_where(profile)}.ask{_no_hosts(kind, profile)}", by=NAME
        )
    return None


def _no_hosts(kind: str, profile: Profile) -> str:
    """What a person must know before approving a ``network`` command of a profile that
    names no hosts: it would run, and reach nothing."""
    if kind != "network" or profile.hosts:
        return ""
    return (
        f"; {_where(profile)} names no hosts, so if approved it runs with no network "
        f"(add hosts = [...] to [{_where(profile)}] in the config to let it reach them)"
    )


RULES: tuple[Rule, ...] = (autonomy, programs, budget, ask)


def _where(profile: Profile) -> str:
    return f"agents.{profile.name}"


def _inside(path: str, folder: str) -> bool:
    from ..confine.protected import inside

    return inside(resolved.realpath(path), (resolved.realpath(folder),))


def _deny(reason: str) -> Decision:
    return Decision("deny", reason, by=NAME)
