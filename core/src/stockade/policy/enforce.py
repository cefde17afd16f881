"""Enforcement of the class: what a command was judged to affect bounds how it is confined.

A ``reads`` command runs with the workspace read-only even when the mode would let it
write: if the judgement was wrong, the sandbox, not the judgement, has the last word. The
decision to run a command never widens its confinement; only this narrowing follows from it.
"""

from __future__ import annotations

import attrs

from ..request.spec import ExecSpec
from ..request.verdict import Classification


def enforce_class(spec: ExecSpec, classification: Classification) -> ExecSpec:
    """``spec`` confined to what its class needs: ``reads`` loses ``workspace-write``."""
    if classification.kind == "reads" and spec.mode == "workspace-write":
        return attrs.evolve(spec, mode="read-only")
    return spec
