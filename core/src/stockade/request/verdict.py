"""What the deciding stages say about a command: its classification and the decision."""

from __future__ import annotations

from attrs import field, frozen

from .checks import _one_of, _strings
from .literals import KINDS, Kind, Verdict


@frozen
class Classification:
    """What a command may affect, with the reasons the classifiers gave.

    Attributes:
        kind: ``reads`` < ``writes`` < ``network`` < ``destroys``.
        reasons: human-readable reasons, from every voter.
        by: the names of the classifiers that voted.
        programs: the programs the command would start, by name: wrappers (``env``,
            ``xargs``, ...) and what they run. A profile's ``programs`` list is checked
            against every one.
        parts: the parts of the shell script it runs (``sh -c SCRIPT``), as a person reads
            them: each simple command as shell words, after the operator that joins it
            (``&& rm -rf build``); empty when it runs no script, or one not read by its parts.
    """

    kind: Kind = field(validator=_one_of(KINDS))
    reasons: tuple[str, ...] = field(default=(), converter=_strings)
    by: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    programs: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    parts: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)

    @property
    def severity(self) -> int:
        """The rank of :attr:`kind`: 0 for ``reads`` up to 3 for ``destroys``."""
        return KINDS.index(self.kind)


@frozen
class Decision:
    """Whether a command may run.

    Attributes:
        verdict: ``allow``, ``ask`` (a person must answer) or ``deny``.
        reason: why, in one sentence a person can act on.
        by: who decided: a policy plugin, a person, or ``preapproved``.
    """

    verdict: Verdict = field(validator=_one_of(("allow", "ask", "deny")))
    reason: str
    by: str = field(kw_only=True, default="")
