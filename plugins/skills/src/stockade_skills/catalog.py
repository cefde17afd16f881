"""Where skills are found: the project's folders first, then the user's; the first wins.

A skill is a directory holding a ``SKILL.md``, directly inside one of the configured
folders. Project folders are relative to the agent's workspace (the working directory for
``default``): the default ``.agents/skills`` is agent configuration, which every sandbox keeps
read-only, so an agent's own commands cannot plant a skill there. A project skill shadows a
user skill of the same name, and the shadowed one is named in a warning.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence

from attrs import frozen

from stockade.config.schema import Config, SkillsConfig

from .errors import SkillNotFound
from .model import SKILL_FILE, Level, Problem, Skill, load_skill


def skill_folders(
    settings: SkillsConfig, workspace: str, environ: Mapping[str, str]
) -> list[tuple[str, Level]]:
    """The folders searched, in order of precedence, each with its level."""
    folders: list[tuple[str, Level]] = [
        (os.path.join(workspace, os.path.expanduser(path)), "project") for path in settings.project
    ]
    user = settings.user
    if user is None:
        base = environ.get("XDG_CONFIG_HOME") or os.path.join(
            environ.get("HOME") or os.path.expanduser("~"), ".config"
        )
        user = (os.path.join(base, "stockade", "skills"),)
    folders += [(os.path.expanduser(path), "user") for path in user]
    return folders


@frozen
class Catalog:
    """The skills found, by name, and the problems met on the way.

    Attributes:
        skills: name -> skill, in the order found.
        problems: every error and warning, each naming its file and field.
        folders: the folders searched, in order.
    """

    skills: Mapping[str, Skill]
    problems: tuple[Problem, ...]
    folders: tuple[str, ...]

    @classmethod
    def find(cls, folders: Sequence[tuple[str, Level]]) -> Catalog:
        """Load every skill in ``folders``; an earlier folder wins a name."""
        skills: dict[str, Skill] = {}
        problems: list[Problem] = []
        for folder, level in folders:
            for candidate in _candidates(folder):
                skill, found = load_skill(candidate, level)
                problems += found
                if skill is None:
                    continue
                if skill.name in skills:
                    winner = skills[skill.name].root
                    path = os.path.join(candidate, SKILL_FILE)
                    problems.append(Problem(path, "name", f"is shadowed by the skill in {winner}"))
                    continue
                skills[skill.name] = skill
        return cls(skills, tuple(problems), tuple(folder for folder, _ in folders))

    @classmethod
    def of(cls, config: Config, workspace: str, environ: Mapping[str, str]) -> Catalog:
        """The catalog ``config`` names, for an agent working in ``workspace``."""
        return cls.find(skill_folders(config.skills, workspace, environ))

    def get(self, name: str) -> Skill:
        """The skill called ``name``.

        Raises:
            SkillNotFound: there is none; the message lists the skills there are.
        """
        found = self.skills.get(name)
        if found is not None:
            return found
        known = ", ".join(sorted(self.skills)) or "none"
        errors = [str(p) for p in self.problems if p.severity == "error"]
        raise SkillNotFound(
            f"no skill named {name!r}; found: {known}",
            hint="`stockade skill list` shows the skills and the folders searched"
            + ("; some failed to load" if errors else ""),
            details={"skill": name, "found": sorted(self.skills), "errors": errors},
        )


def _candidates(folder: str) -> Iterator[str]:
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
            continue
        if os.path.isfile(os.path.join(entry.path, SKILL_FILE)):
            yield entry.path
