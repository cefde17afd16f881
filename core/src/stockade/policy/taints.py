"""What the breaker counts (:class:`Taint`) and how it says why it trips
(:mod:`stockade.policy.breaker` keeps a run's taints and checks its steps)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attrs import frozen

if TYPE_CHECKING:
    from ..request.literals import TaintKind

SHOWN = 3
"""How many sources of each kind a reason names before it counts the rest."""
REFUSED = "refused at the egress proxy: "
"""What a connection refused by the breaker's check where bytes leave is recorded with, before
the breaker's reason."""


@frozen
class Taint:
    """One fact the breaker counts.

    Attributes:
        taint: ``private`` or ``untrusted``.
        source: what caused it (see :mod:`stockade.policy.breaker`).
        detail: which one, in words.
    """

    taint: TaintKind
    source: str
    detail: str


ONCE = frozenset({"output", "network"})
"""Sources counted once per run: a run that printed once holds somebody else's words, and
a step a thousand steps later that prints again tells the breaker nothing new."""


def split(taints: list[Taint]) -> tuple[list[Taint], list[Taint]]:
    """``taints`` parted: the private ones, then the untrusted ones."""
    return (
        [t for t in taints if t.taint == "private"],
        [t for t in taints if t.taint == "untrusted"],
    )


def key(taint: Taint) -> tuple[str, ...]:
    """What makes a taint new to a run: a private thing, or a file read or listed, each
    time it differs; output and network once (:data:`ONCE`)."""
    if taint.source in ONCE:
        return (taint.taint, taint.source)
    return (taint.taint, taint.source, taint.detail)


def reason(private: list[Taint], untrusted: list[Taint]) -> str:
    """Why the breaker asks, naming what private thing and which untrusted source."""
    return (
        f"the breaker: this run holds private data ({listed(private)}) and has read "
        f"somebody else's words ({listed(untrusted)}), so a step that can reach the network "
        "could send the one out on the say of the other"
    )


def listed(taints: list[Taint]) -> str:
    """``taints`` in words, the first :data:`SHOWN` of them named."""
    words = [f"{t.source} {t.detail}" for t in taints[:SHOWN]]
    if len(taints) > SHOWN:
        words.append(f"and {len(taints) - SHOWN} more")
    return "; ".join(words)
