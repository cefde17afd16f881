"""What the supervisor refuses: the protected paths found in the writable roots.

Landlock only grants: a right on a folder holds for all beneath it, so it cannot keep a
workspace writable and its ``.git`` not. The supervisor refuses, for every call it is sent,
what lies at or beneath a protected path the survey found before the run (every ``.git``,
``gitdir:`` target, ``core.hooksPath`` folder, a bare repository's hooks and config, agent
and editor config, dotfiles, run-later folders, and the credential stores): bubblewrap's
read-only binds, drawn by the same survey. A protected name that appears during the run is
the command's own until it ends, and is quarantined then, as under bubblewrap. Everything
else is left to Landlock, which judges the supervisor's own call as it would the command's
(same domain): the system secrets, the masked paths and everything outside the writable
roots.
"""

from __future__ import annotations

import errno

from attrs import field, frozen

from stockade.confine import protected

from .terminals import Terminals

REFUSED = errno.EROFS
"""The error of a refused write, as bubblewrap's read-only mount answers it."""


@frozen
class Rules:
    """The protected paths of one run.

    Attributes:
        kept: the paths the survey found (read-only and masked), refused with all beneath.
        terminals: the pseudo-terminals the run made (only those may be opened).
    """

    kept: tuple[str, ...] = ()
    terminals: Terminals = field(factory=Terminals, eq=False)

    @classmethod
    def of(cls, survey: protected.Survey) -> Rules:
        """The rules of a survey."""
        return cls((*survey.read_only, *survey.masked))

    def refuses(self, path: str) -> bool:
        """Whether ``path`` (absolute, resolved but for its last name) may not change."""
        return protected.inside(path, self.kept)

    def holds(self, path: str) -> bool:
        """Whether ``path`` is refused, or a folder holding a refused path (a rename of it
        would carry the protected path away from where it is kept)."""
        return self.refuses(path) or any(protected.inside(kept, (path,)) for kept in self.kept)
