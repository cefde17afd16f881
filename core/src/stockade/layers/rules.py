"""What a landing applies besides the layer itself (:class:`Rules`), and what it did
(:class:`Tally`): shared by the landing (:mod:`.commit`), the real tree's clearing
(:mod:`.clearing`), the survey of what would land (:mod:`.survey`) and the journal."""

from __future__ import annotations

from collections.abc import Iterable

import attrs
from attrs import frozen

from ..errors import SandboxUnavailable


@attrs.define
class Tally:
    """What landing did, filled in as it goes (paths absolute; folders end in ``/``)."""

    created: list[str] = attrs.field(factory=list)
    modified: list[str] = attrs.field(factory=list)
    deleted: list[str] = attrs.field(factory=list)
    quarantined: list[str] = attrs.field(factory=list)
    conflicts: list[str] = attrs.field(factory=list)
    failed: list[str] = attrs.field(factory=list)

    def fail(self, root: str, error: BaseException) -> None:
        """Say that landing the layer of ``root`` stopped at ``error``: what it landed
        before stays, the rest of it does not land."""
        self.failed.append(f"{root}: {why(error)}; the rest of it stays out")


def why(error: BaseException) -> str:
    """An error in a few words: an ``OSError``'s own, else its kind and message."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    if isinstance(error, SandboxUnavailable):
        return error.message
    return f"{type(error).__name__}: {str(error)[:200]}".rstrip(": ")


def _sorted(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(names))


@frozen
class Rules:
    """What a commit applies besides the layer itself.

    Attributes:
        quarantine: where protected names go: this folder plus their absolute path.
        writable_dotfiles: the dotfiles the profile opened (they land).
        bare: bare repositories known before the run (their hooks and config stay).
        hooks: the folders a git config names as ``core.hooksPath`` (there or not): what
            lands at or beneath one is quarantined, as a ``.git/hooks`` would be.
        since: when the command started (``time.time_ns()``, less a clock tick); a path of
            the root changed after it (by another command's commit, by a person) and
            changed by this layer too is a conflict: this layer's version is kept aside
            (``<quarantine>/conflicts/``), never mixed in. ``0``: no such check.
        offset: the wall clock less the boot clock when ``since`` was taken, and ``boot``
            that boot's identity: whether the wall clock was set since
            (:func:`~stockade.layers.clock.settled`). ``0``, ``""``: not kept.
    """

    quarantine: str
    writable_dotfiles: tuple[str, ...] = attrs.field(default=(), converter=_sorted)
    bare: tuple[str, ...] = attrs.field(default=(), converter=_sorted)
    hooks: tuple[str, ...] = attrs.field(default=(), converter=_sorted)
    since: int = 0
    offset: int = 0
    boot: str = ""

    @property
    def dotfiles(self) -> frozenset[str]:
        """The opened dotfiles, as :func:`~stockade.confine.protected.kind_of` takes them."""
        return frozenset(self.writable_dotfiles)
