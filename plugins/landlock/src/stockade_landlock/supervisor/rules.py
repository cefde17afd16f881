"""What the supervisor refuses: the protected paths of a run's writable roots.

Landlock only grants: a right on a folder holds for all beneath it, so it cannot keep a
workspace writable and its ``.git`` not. The supervisor refuses, for every call it is sent,
what lies at or beneath a protected name in a writable root the survey covered (``.git``,
agent and editor config, dotfiles, run-later folders: :func:`stockade.confine.protected.
enclosing`), at any depth and whether it exists yet or not, and what the survey found by
path (a ``gitdir:`` target, a ``core.hooksPath`` folder, a bare repository's hooks and
config, the credential stores). Everything else is left to Landlock, which judges the
supervisor's own call as it would the command's (same domain): the system secrets, the
masked paths and everything outside the writable roots.
"""

from __future__ import annotations

import errno

from attrs import frozen

from stockade.confine import protected

REFUSED = errno.EROFS
"""The error of a refused write, as bubblewrap's read-only mount answers it."""


@frozen
class Rules:
    """The protected paths of one run.

    Attributes:
        roots: the writable roots the survey covered, resolved.
        kept: paths the survey found (read-only and masked), refused with all beneath them.
        writable_dotfiles: the dotfiles the profile opened.
    """

    roots: tuple[str, ...]
    kept: tuple[str, ...] = ()
    writable_dotfiles: frozenset[str] = frozenset()

    @classmethod
    def of(cls, survey: protected.Survey) -> Rules:
        """The rules of a survey."""
        return cls(
            tuple(survey.roots),
            (*survey.read_only, *survey.masked),
            survey.writable_dotfiles,
        )

    def refuses(self, path: str) -> bool:
        """Whether ``path`` (absolute, resolved but for its last name) may not change."""
        if not protected.inside(path, self.roots):
            return False
        if protected.enclosing(path, self.writable_dotfiles) is not None:
            return True
        return protected.inside(path, self.kept)

    def holds(self, path: str) -> bool:
        """Whether ``path`` is refused, or a folder holding a refused path (a rename of it
        would carry the protected path to where its name no longer protects it)."""
        if self.refuses(path):
            return True
        return any(protected.inside(kept, (path,)) for kept in self.kept)
