"""The double-safety gate: a skill's script runs only when all three of its states say so.

1. The global safety is off: ``[skills] safe_mode = false`` in the config, or ``--unsafe``
   for one invocation (the host's effective unsafe grant). It is on by default.
2. The skill itself declares ``safe_mode: false``. Not declaring it counts as ``true``.
3. The agent already holds command execution for the script's interpreter: its profile's
   ``programs`` is unset (any program) or names the interpreter.

An open gate only lets the command reach the policy, which still decides (and may ask a
person or deny), and the sandbox, which still confines it. Open or shut, the gate's decision
is recorded as the command's first permission event.
"""

from __future__ import annotations

from typing import Literal

from attrs import frozen

from stockade.request.spec import Profile
from stockade.request.verdict import Decision

GATE = "skill-gate"


@frozen
class Gate:
    """The three states of the gate for one script, and what they add up to.

    Attributes:
        global_safe_mode: the effective global safety (``True``: no script runs).
        global_source: what set it: ``config``, ``default`` or ``--unsafe``.
        skill_safe_mode: what the skill declares (``None``: not declared, counts as true).
        interpreter: the program the script needs.
        interpreter_allowed: the agent's profile lets it run that program.
        profile: the agent profile's name.
    """

    global_safe_mode: bool
    global_source: Literal["config", "default", "--unsafe"]
    skill_safe_mode: bool | None
    interpreter: str
    interpreter_allowed: bool
    profile: str

    @classmethod
    def of(
        cls,
        *,
        global_safe_mode: bool,
        source: Literal["config", "default", "--unsafe"],
        skill_safe_mode: bool | None,
        interpreter: str,
        profile: Profile,
    ) -> Gate:
        """The gate for a script needing ``interpreter``, run for ``profile``."""
        allowed = profile.programs is None or interpreter in profile.programs
        return cls(global_safe_mode, source, skill_safe_mode, interpreter, allowed, profile.name)

    @property
    def open(self) -> bool:
        """All three states let the script go on to the policy."""
        return (
            not self.global_safe_mode and self.skill_safe_mode is False and self.interpreter_allowed
        )

    def states(self) -> str:
        """The three states, in words."""
        where = {
            "config": "[skills] safe_mode",
            "default": "the default",
            "--unsafe": "--unsafe",
        }[self.global_source]
        skill = {None: "not declared, so true", True: "true", False: "false"}[self.skill_safe_mode]
        may = "may" if self.interpreter_allowed else "may not"
        return (
            f"global safe_mode {'on' if self.global_safe_mode else 'off'} ({where}); "
            f"skill safe_mode {skill}; agent {self.profile!r} {may} run {self.interpreter}"
        )

    def fixes(self) -> list[str]:
        """What a person would change to open the gate (empty when it is open)."""
        out = []
        if self.global_safe_mode:
            out.append("turn the global safety off: --unsafe, or [skills] safe_mode = false")
        if self.skill_safe_mode is not False:
            out.append("the skill must declare `safe_mode: false` in its SKILL.md")
        if not self.interpreter_allowed:
            out.append(f"add {self.interpreter} to agents.{self.profile}.programs")
        return out

    def decision(self) -> Decision:
        """The gate's decision, as recorded: ``allow`` (on to the policy) or ``deny``."""
        if self.open:
            return Decision("allow", f"the skill gate is open: {self.states()}", by=GATE)
        return Decision("deny", f"the skill gate is shut: {self.states()}", by=GATE)
