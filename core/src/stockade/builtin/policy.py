"""The built-in decision: allow what a person typed at the CLI, deny everything else.

It runs last (``trylast``), so any installed policy plugin decides first. It is honest about
what it is: with no policy installed there is nobody to judge an agent's command, so an
agent's command (origin ``api`` or ``mcp``) is denied with a reason that says what to install.
"""

from __future__ import annotations

from .. import hookimpl
from ..types import Classification, Decision, ExecSpec, Profile

NAME = "builtin-policy"


@hookimpl(trylast=True)
def stockade_decide(spec: ExecSpec, classification: Classification, profile: Profile) -> Decision:
    """Allow commands from the CLI; deny agents' commands when no policy is installed."""
    if spec.origin == "cli":
        return Decision("allow", "typed at the command line by a person", by=NAME)
    return Decision(
        "deny",
        f"no policy plugin decides {spec.origin} commands (profile {profile.name!r}), and the "
        "built-in policy only allows what a person types at the CLI",
        by=NAME,
    )
