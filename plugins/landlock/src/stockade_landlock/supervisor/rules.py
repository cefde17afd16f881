"""What the supervisor refuses: the protected paths found in the writable roots, and new ones.

Landlock only grants: a right on a folder holds for all beneath it, so it cannot keep a
workspace writable and its ``.git`` not. The supervisor refuses, for every call it is sent,
what lies at or beneath a protected path the survey found before the run (every ``.git``,
``gitdir:`` target, ``core.hooksPath`` folder (there or not yet), a bare repository's hooks
and config, agent and editor config, dotfiles, run-later folders, and the credential
stores): bubblewrap's
read-only binds, drawn by the same survey. It refuses a protected name made anew in a
surveyed root too (:meth:`Rules.refuses_new`), with one exception, so that ``git init``
and ``git clone`` work: a ``.git`` folder the command makes itself (``mkdir``, so empty),
whose ``hooks`` folder then takes only git's inert ``*.sample`` files. Such a fresh
repository is the command's own until it ends and is quarantined then, as under
bubblewrap. Everything else is left to Landlock, which judges the supervisor's own call as
it would the command's (same domain): the system secrets, the masked paths and everything
outside the writable roots.
"""

from __future__ import annotations

import errno
import threading
from typing import Literal

from attrs import field, frozen

from stockade.confine import protected

from .repositories import Repositories
from .terminals import Terminals

_BARE_KEPT = frozenset(name.lower() for name in protected.BARE_KEPT)
_FINE_LIMIT = 4096  # folders known to be neither kept nor beneath a protected name
REFUSED = errno.EROFS
"""The error of a refused write, as bubblewrap's read-only mount answers it."""
Making = Literal["file", "mkdir", "node", "symlink", "link", "rename"]
"""How a new name is made (what :meth:`Rules.refuses_new` judges)."""


class Fresh:
    """The ``.git`` folders the command made during the run (by ``mkdir``, so empty)."""

    def __init__(self) -> None:
        self._made: set[str] = set()
        self._lock = threading.Lock()

    def add(self, path: str) -> None:
        """Keep ``path``, a ``.git`` the command just made."""
        with self._lock:
            self._made.add(path)

    def holding(self, path: str) -> str | None:
        """The fresh ``.git`` that ``path`` is or lies beneath, or ``None``."""
        if not self._made:
            return None
        with self._lock:
            made = tuple(self._made)
        return next((m for m in made if protected.inside(path, (m,))), None)


@frozen
class Rules:
    """The protected paths of one run.

    Attributes:
        kept: the paths the survey found (read-only and masked), refused with all beneath.
        terminals: the pseudo-terminals the run made (only those may be opened).
        bare: the bare repositories the survey found; a name git reads hooks, config or
            a common folder from (:data:`~stockade.confine.protected.BARE_KEPT`) is not
            made anew in one.
    """

    kept: tuple[str, ...] = ()
    terminals: Terminals = field(factory=Terminals, eq=False)
    roots: tuple[str, ...] = ()
    writable_dotfiles: frozenset[str] = frozenset()
    fresh: Fresh = field(factory=Fresh, eq=False)
    repositories: Repositories = field(factory=Repositories, eq=False)
    bare: frozenset[str] = frozenset()
    _kept: frozenset[str] = field(init=False, eq=False, repr=False)
    _fine: dict[str, str] = field(init=False, eq=False, repr=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        kept = frozenset(k.rstrip("/") or "/" for k in self.kept)
        object.__setattr__(self, "_kept", kept)

    @classmethod
    def of(cls, survey: protected.Survey) -> Rules:
        """The rules of a survey."""
        return cls(
            (*survey.read_only, *survey.masked, *survey.hooks),  # hooks: there or not yet
            roots=survey.roots,
            writable_dotfiles=survey.writable_dotfiles,
            bare=frozenset(survey.bare),
        )

    def refuses_new(  # noqa: PLR0911 - one answer per case
        self, path: str, how: Making, at: tuple[int, bytes] | None = None
    ) -> bool:
        """Whether a new name ``path`` (absolute, resolved but for its last name) may not
        be made by ``how``: a protected name in a surveyed root, or one beneath it, but in
        a fresh ``.git`` (:class:`Fresh`); a ``.git`` made by ``mkdir`` starts one. ``at``
        (the folder, opened, and the name): a repository under any name is judged too
        (:class:`~.repositories.Repositories`)."""
        folder, _, last = path.rpartition("/")
        root = self._fine.get(folder)  # a folder seen before: not kept, no protected name
        clean = root is not None
        if root is None:
            if self.refuses(folder):
                return True
            root = next((r for r in self.roots if path.startswith(r + "/")), "")
            clean = not root or folder == root or self._clean(root, folder)
            if clean:
                if len(self._fine) >= _FINE_LIMIT:
                    self._fine.clear()
                self._fine[folder] = root
        if path in self._kept:
            return True
        if folder in self.bare and last.lower() in _BARE_KEPT:
            return True  # a bare repository's hooks, config, commondir, ... made anew
        if not root:
            return False  # the run's home, caches and scratch: the command's own
        if at is not None and self.repositories.refuses(*at, how):
            return True
        repository = self.fresh.holding(path)
        if repository is not None:
            return _in_hooks(path[len(repository) + 1 :], how)
        if not clean:
            return True  # beneath a protected name (not a fresh .git: seen above)
        if protected.kind_of(path, self.writable_dotfiles) is None:
            return False
        # a fresh repository (git init, git clone): kept in :class:`Fresh`
        return not (how == "mkdir" and last == protected.GIT)

    def _clean(self, root: str, folder: str) -> bool:
        """Whether no folder from ``root`` (excluded) down to ``folder`` has a protected
        name."""
        prefix = root
        for part in folder[len(root) + 1 :].split("/"):
            prefix = f"{prefix}/{part}"
            if protected.kind_of(prefix, self.writable_dotfiles) is not None:
                return False
        return True

    def refuses(self, path: str) -> bool:
        """Whether ``path`` (absolute, resolved but for its last name) may not change."""
        kept = self._kept
        if not kept:
            return False
        probe = path
        while probe:  # the path, then each folder above it: one look-up each
            if probe in kept:
                return True
            probe = probe[: probe.rfind("/")]
        return "/" in kept

    def holds(self, path: str) -> bool:
        """Whether ``path`` is refused, or a folder holding a refused path (a rename of it
        would carry the protected path away from where it is kept)."""
        return self.refuses(path) or any(protected.inside(kept, (path,)) for kept in self.kept)


def _in_hooks(inside: str, how: Making) -> bool:
    """Whether ``inside`` (a path in a fresh ``.git``) is a name its ``hooks`` folder may
    not take: anything but a file named ``*.sample`` (git's templates, which never run)."""
    parts = inside.split("/")
    if parts[0] != "hooks":
        return False
    if len(parts) == 1:  # the name hooks itself: an empty folder only, never one brought in
        return how != "mkdir"
    return not (len(parts) == 2 and how == "file" and parts[1].endswith(".sample"))
