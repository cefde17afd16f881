"""What the ``test_skills_*.py`` files share: the example skills under ``skills/`` (the ones the
docs show), and a skill folder written from its front matter and files."""

from __future__ import annotations

import textwrap
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "skills"


def write_skill(parent: Path, name: str, front: str, files: dict[str, str] | None = None) -> Path:
    folder = parent / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\n{textwrap.dedent(front).strip()}\n---\n\nUse it.\n")
    for path, text in (files or {}).items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return folder
