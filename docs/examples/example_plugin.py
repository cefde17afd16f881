"""An example Stockade plugin: a classifier and a policy (tested by tests/test_docs_plugins.py).

Install it by naming this module in an entry point of the ``stockade`` group::

    [project.entry-points.stockade]
    example = "example_plugin"

The classifier votes ``reads`` for ``ls`` and ``cat`` from the system directories and
abstains on everything else. The policy allows what only reads, denies what destroys, and
asks a person about the rest, whoever typed the command.
"""

from __future__ import annotations

import os

from stockade import hookimpl
from stockade.request.spec import ExecSpec, Profile
from stockade.request.verdict import Classification, Decision

NAME = "example"
READ_ONLY_PROGRAMS = frozenset({"ls", "cat"})
SYSTEM_DIRS = frozenset({"/bin", "/usr/bin"})


# --8<-- [start:classify]
@hookimpl
def stockade_classify(spec: ExecSpec) -> Classification | None:
    """Vote ``reads`` for ``ls`` and ``cat`` from a system directory; abstain otherwise."""
    # spec.program is the resolved absolute path, so an agent's own ./ls is not trusted.
    directory, program = os.path.split(spec.program)
    if program in READ_ONLY_PROGRAMS and directory in SYSTEM_DIRS:
        return Classification("reads", (f"{program} only reads files",), by=(NAME,))
    return None


# --8<-- [end:classify]


# --8<-- [start:decide]
@hookimpl
def stockade_decide(
    spec: ExecSpec, classification: Classification, profile: Profile
) -> Decision | None:
    """Allow ``reads``, deny ``destroys``, ask a person about everything else."""
    if classification.kind == "reads":
        return Decision("allow", "it only reads files", by=NAME)
    if classification.kind == "destroys":
        return Decision("deny", "commands that may destroy data are never run", by=NAME)
    return Decision(
        "ask", f"{classification.kind} commands need a person (profile {profile.name})", by=NAME
    )


# --8<-- [end:decide]
