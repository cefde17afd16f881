"""The skills plugin's errors: structured, each with a code, a hint and its details."""

from __future__ import annotations

from stockade.errors import StockadeError


class SkillNotFound(StockadeError):
    """No skill of that name was found in the configured folders."""

    code = "skill_not_found"


class BadResource(StockadeError):
    """A resource path is malformed, missing, leaves the skill, or may not be executed."""

    code = "bad_resource"


class ExecutionError(StockadeError):
    """A skill's script did not run to a clean end: the gate refused it, its interpreter is
    missing, it timed out, or it exited non-zero. The message names the gate's states and the
    script's path; ``details`` carries them, and the output when there is some."""

    code = "execution_error"
    exit_status = 1
