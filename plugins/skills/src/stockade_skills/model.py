"""One skill: its ``SKILL.md`` front matter, checked against the Agent Skills specification.

The specification's rules, and how strictly each is kept here:

- ``name``: 1-64 characters of lowercase ASCII letters, digits and hyphens, with no leading,
  trailing or double hyphen, equal to the skill's directory name. A breach is a warning and
  the skill loads under the name it declares; a missing or non-text name is an error.
- ``description``: 1-1024 characters. Missing or empty is an error (a model could not know
  when to use the skill); too long is a warning.
- ``license`` (text), ``compatibility`` (text, at most 500 characters), ``metadata`` (text to
  text) and ``allowed-tools`` (space-separated text, a list is accepted): a breach is a
  warning and the field is coerced or dropped.
- Stockade's own ``safe_mode``: a YAML boolean. Anything else counts as ``true`` (safe), with
  a warning, so that ``safe_mode: "false"`` never opens the gate by accident.

An error keeps the skill out of the catalog; a warning keeps it in. Either names the file,
the field and the rule. YAML is read with PyYAML's safe loader: no tags, no objects.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from attrs import field, frozen

from stockade import resolved

NAME_MAX = 64
DESCRIPTION_MAX = 1024
COMPATIBILITY_MAX = 500
SKILL_FILE = "SKILL.md"
_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*\Z")
KNOWN_FIELDS = frozenset(
    {"name", "description", "license", "compatibility", "metadata", "allowed-tools", "safe_mode"}
)
Level = Literal["project", "user"]
Warn = Callable[[str, str], object]


@frozen
class Problem:
    """Something wrong in a skill's ``SKILL.md``.

    Attributes:
        path: the file.
        field: the front-matter field (``""`` for the file as a whole).
        rule: what the field breaks, in words a skill author can act on.
        severity: ``error`` keeps the skill out; ``warning`` loads it anyway.
    """

    path: str
    field: str
    rule: str
    severity: Literal["error", "warning"] = "warning"

    def __str__(self) -> str:
        where = f"field {self.field!r}: " if self.field else ""
        return f"{self.severity}: {self.path}: {where}{self.rule}"


@frozen
class Skill:
    """A loaded skill.

    Attributes:
        name: its name, as its front matter declares it.
        description: what it does and when to use it.
        root: its directory (real path).
        level: ``project`` or ``user``: where it was found.
        body: the instructions: ``SKILL.md`` after the front matter.
        license: its license, if it names one.
        compatibility: what it needs from its environment, if it says.
        metadata: extra text properties.
        allowed_tools: the tools it says it may use (experimental in the specification).
        safe_mode: what it declares: ``False`` lets its scripts run behind the gate; ``True``
            or ``None`` (not declared) never.
    """

    name: str
    description: str
    root: str = field(kw_only=True)
    level: Level = field(kw_only=True)
    body: str = field(kw_only=True, repr=False)
    license: str | None = field(kw_only=True, default=None)
    compatibility: str | None = field(kw_only=True, default=None)
    metadata: Mapping[str, str] = field(kw_only=True, factory=dict)
    allowed_tools: tuple[str, ...] = field(kw_only=True, default=())
    safe_mode: bool | None = field(kw_only=True, default=None)


def name_problem(name: str) -> str | None:
    """What is wrong with ``name`` as a skill name, or ``None``."""
    if not 1 <= len(name) <= NAME_MAX:
        return f"must be 1-{NAME_MAX} characters, got {len(name)}"
    if not _NAME.match(name):
        return (
            "must be lowercase ASCII letters, digits and hyphens, "
            f"with no leading, trailing or double hyphen; got {name!r}"
        )
    return None


def split_front_matter(text: str) -> tuple[str, str] | None:
    """``(yaml, body)`` of a ``SKILL.md``, or ``None`` when it opens with no front matter."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None
    for index in range(1, len(lines)):
        if lines[index].strip() == "---":
            return "".join(lines[1:index]), "".join(lines[index + 1 :])
    return None


def _front_matter(path: str) -> tuple[dict[str, Any], str] | str:
    """``(fields, body)`` of the ``SKILL.md`` at ``path``, or the rule it breaks."""
    import yaml

    try:
        with open(path, "rb") as handle:
            raw = handle.read(1024 * 1024 + 1)
    except OSError as exc:
        return f"cannot be read: {exc.strerror}"
    if len(raw) > 1024 * 1024:
        return "is over 1 MiB"
    parts = split_front_matter(raw.decode("utf-8", "replace"))
    if parts is None:
        return "must open with YAML front matter between two '---' lines"
    try:
        data = yaml.safe_load(parts[0])
    except yaml.YAMLError as exc:
        return f"front matter is not valid YAML: {' '.join(str(exc).split())}"
    if not isinstance(data, dict):
        return "front matter must be a mapping of fields"
    return data, parts[1]


def load_skill(folder: str, level: Level) -> tuple[Skill | None, list[Problem]]:
    """The skill in ``folder`` (``None`` when an error keeps it out), with its problems."""
    path = os.path.join(folder, SKILL_FILE)
    problems: list[Problem] = []

    def error(field_name: str, rule: str) -> tuple[None, list[Problem]]:
        problems.append(Problem(path, field_name, rule, "error"))
        return None, problems

    found = _front_matter(path)
    if isinstance(found, str):
        return error("", found)
    data, body = found
    name = data.get("name")
    if not isinstance(name, str) or not name:
        return error("name", "is required, as text")
    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        return error("description", "is required: say what the skill does and when to use it")

    def warn(field_name: str, rule: str) -> None:
        problems.append(Problem(path, field_name, rule))

    if (why := name_problem(name)) is not None:
        warn("name", why)
    if name != os.path.basename(folder):
        warn("name", f"must equal its directory name ({os.path.basename(folder)!r})")
    if len(description) > DESCRIPTION_MAX:
        warn("description", f"must be at most {DESCRIPTION_MAX} characters, got {len(description)}")
    for unknown in sorted(set(map(str, data)) - KNOWN_FIELDS):
        warn(unknown, "is not a field of the specification, so it is ignored")
    skill = Skill(
        name,
        description,
        root=resolved.realpath(folder),
        level=level,
        body=body,
        license=_text(data, "license", None, warn),
        compatibility=_text(data, "compatibility", COMPATIBILITY_MAX, warn),
        metadata=_metadata(data.get("metadata"), warn),
        allowed_tools=_tools(data.get("allowed-tools"), warn),
        safe_mode=_safe_mode(data, warn),
    )
    return skill, problems


def _text(data: Mapping[str, Any], key: str, limit: int | None, warn: Warn) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        warn(key, f"must be text, got {type(value).__name__}; read as {str(value)!r}")
        value = str(value)
    if limit is not None and len(value) > limit:
        warn(key, f"must be at most {limit} characters, got {len(value)}")
    return value


def _metadata(value: object, warn: Warn) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        warn("metadata", f"must map text to text, got {type(value).__name__}; ignored")
        return {}
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            warn("metadata", f"entry {key!r} must map text to text; read as text")
        out[str(key)] = str(item)
    return out


def _tools(value: object, warn: Warn) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    warn("allowed-tools", "must be space-separated text; ignored")
    return ()


def _safe_mode(data: Mapping[str, Any], warn: Warn) -> bool | None:
    if "safe_mode" not in data:
        return None
    value = data["safe_mode"]
    if isinstance(value, bool):
        return value
    warn("safe_mode", f"must be true or false, got {value!r}; counts as true (scripts never run)")
    return True
