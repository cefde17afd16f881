"""The skill tool's parameters as a JSON schema (standard library only: the plugin module
offers the MCP tool with it, and every host loads that module)."""

from __future__ import annotations

from typing import Any

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "skill_name": {"type": "string", "description": "the skill, by its name"},
        "resource": {
            "type": "string",
            "description": "a file inside the skill (e.g. references/guide.md); "
            "omit it for the skill's instructions and its list of files",
        },
        "offset": {"type": "integer", "minimum": 0, "default": 0},
        "max_chars": {"type": "integer", "minimum": 1},
        "execute": {
            "type": "boolean",
            "default": False,
            "description": "run resource (under scripts/) instead of reading it",
        },
        "args": {"type": "array", "items": {"type": "string"}, "default": []},
        "timeout": {"type": "number", "exclusiveMinimum": 0},
    },
    "required": ["skill_name"],
    "additionalProperties": False,
}
