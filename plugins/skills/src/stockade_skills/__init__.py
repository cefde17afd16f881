"""Agent Skills for Stockade: loading, the skill tool and the double-safety gate.

``SkillTool(host)`` is the tool; :mod:`.catalog` finds skills, :mod:`.model` checks their
``SKILL.md``, :mod:`.resources` reads and copies their files, :mod:`.gate` decides whether a
script may run, and :mod:`.runner` runs it through the host. :mod:`.plugin` offers the
``skill`` command and MCP tool; :mod:`.cli` and :mod:`.mcp_tool` are their code.

Every host imports this package (for :mod:`.plugin`), so the names below are imported on
first use, not with the package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .catalog import Catalog
    from .errors import BadResource, ExecutionError, SkillNotFound
    from .gate import Gate
    from .model import Problem, Skill
    from .schema import SCHEMA
    from .tool import SkillOutput, SkillTool

_WHERE = {
    "SCHEMA": "schema",
    "BadResource": "errors",
    "Catalog": "catalog",
    "ExecutionError": "errors",
    "Gate": "gate",
    "Problem": "model",
    "Skill": "model",
    "SkillNotFound": "errors",
    "SkillOutput": "tool",
    "SkillTool": "tool",
}

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


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value: object = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
