"""Deliberately broken sandbox providers: the conformance kit must fail each of them.

Each mutant is the bubblewrap or Landlock provider with one realistic mistake, the kind a
backend author makes (a list copied short, an option dropped, the host's environment merged
back). ``tests/test_kit_mutants.py`` installs this package out of tree (a ``*.dist-info`` with
a ``stockade`` entry point, on ``PYTHONPATH``) and runs ``python -m stockade.conformance``
against each mutant, on the attacks of the promise it breaks, and requires the kit to fail
with that promise named. Never shipped: it lives in the repository's tests only.

A mistake is made by swapping a name the provider's own modules look up (never the core's
lists, which the kit reads too) for the duration of ``confine`` and ``hides``, or by
rewriting the plan ``confine`` returned.
"""

from __future__ import annotations

from collections.abc import Callable

from stockade import hookimpl
from stockade.confine.provider import SandboxProvider

from . import bubblewrap, landlock
from .base import Mutant

__all__ = ["MUTANTS", "Mutant"]

MUTANTS: tuple[type[Mutant], ...] = tuple(
    cls
    for module in (bubblewrap, landlock)
    for cls in vars(module).values()
    if isinstance(cls, type) and issubclass(cls, Mutant) and cls is not Mutant
)
"""Every mutant, in the order defined."""


@hookimpl
def stockade_register_sandboxes(register: Callable[[type[SandboxProvider]], None]) -> None:
    """Register every mutant under its ``mutant-*`` name."""
    for cls in MUTANTS:
        register(cls)
