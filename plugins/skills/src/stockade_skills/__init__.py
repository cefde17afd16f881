"""Agent Skills for Stockade: loading, the skill tool and the double-safety gate.

``SkillTool(host)`` is the tool; :mod:`.catalog` finds skills, :mod:`.model` checks their
``SKILL.md``, :mod:`.resources` reads and copies their files, :mod:`.gate` decides whether a
script may run, and :mod:`.runner` runs it through the host.
"""

from .catalog import Catalog
from .errors import BadResource, ExecutionError, SkillNotFound
from .gate import Gate
from .model import Problem, Skill
from .tool import SCHEMA, SkillOutput, SkillTool

__all__ = [
    "SCHEMA",
    "BadResource",
    "Catalog",
    "ExecutionError",
    "Gate",
    "Problem",
    "Skill",
    "SkillNotFound",
    "SkillOutput",
    "SkillTool",
]
