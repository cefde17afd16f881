"""The ``skill`` tool: read a skill's instructions and files, or run one of its scripts.

One call, the same parameters everywhere (Python, ``stockade skill``, the MCP server):
``skill_name``; ``resource`` (a path inside the skill; none for its instructions);
``offset`` and ``max_chars`` (a window on the text); ``execute`` (run ``resource``, which must
then be under ``scripts/`` or a non-standard folder); ``args`` (its argv); ``timeout``
(seconds, capped by the host).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from attrs import field, frozen

from stockade.errors import UsageError
from stockade.host import Host
from stockade.request.literals import Origin
from stockade.request.result import RunResult
from stockade.run.executor import AbortToken
from stockade.workspace.folders import workspace_of

from . import resources, runner
from .catalog import Catalog
from .errors import BadResource, ExecutionError
from .gate import Gate
from .model import Skill


@frozen
class SkillOutput:
    """What one call of the tool gives back.

    Attributes:
        skill: the skill's name.
        resource: the file read or run (``None``: the instructions).
        text: the window of text asked for; for a run, the ``[SKILL_SCRIPT_EXECUTED]``
            envelope of its output.
        total_chars: the length of the whole text.
        next_offset: where the next window starts, or ``None`` when this one reached the end.
        result: the run's full result, when a script ran.
        left_out: entries the copy for the run left out, and why.
    """

    skill: str
    resource: str | None
    text: str = field(kw_only=True)
    total_chars: int = field(kw_only=True)
    next_offset: int | None = field(kw_only=True, default=None)
    result: RunResult | None = field(kw_only=True, default=None)
    left_out: tuple[str, ...] = field(kw_only=True, default=())


class SkillTool:
    """The skill tool for one agent profile on one host.

    Args:
        host: the host every script goes through.
        profile: the agent profile whose workspace, programs and policy apply.
        unsafe: turn the global safety off for this tool (``--unsafe``); the config's
            ``[skills] safe_mode = false`` does the same for every tool.
        origin: who calls (``api``, ``cli``, ``mcp``), as recorded.
        preapproved: a person approved in advance what the policy would ask for.
        environ: where the user's skill folder is found (``XDG_CONFIG_HOME``, ``HOME``).
    """

    def __init__(
        self,
        host: Host,
        *,
        profile: str = "default",
        unsafe: bool = False,
        origin: Origin = "api",
        preapproved: bool = False,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.host = host
        self.profile = host.config.profile(profile)
        self.unsafe = unsafe
        self.origin: Origin = origin
        self.preapproved = preapproved
        self.environ = dict(host.environ if environ is None else environ)

    def catalog(self) -> Catalog:
        """The skills this agent sees now (found again on every call)."""
        workspace = workspace_of(self.host.config, self.profile) or os.getcwd()
        return Catalog.of(self.host.config, workspace, self.environ)

    def gate(self, *, skill_safe_mode: bool | None, interpreter: str) -> Gate:
        """The gate's states for a script of a skill declaring ``skill_safe_mode``."""
        settings = self.host.config.skills
        if self.unsafe:
            return Gate.of(
                global_safe_mode=False,
                source="--unsafe",
                skill_safe_mode=skill_safe_mode,
                interpreter=interpreter,
                profile=self.profile,
            )
        return Gate.of(
            global_safe_mode=settings.safe_mode,
            source="config" if self.host.config.source else "default",
            skill_safe_mode=skill_safe_mode,
            interpreter=interpreter,
            profile=self.profile,
        )

    def __call__(
        self,
        skill_name: str,
        resource: str | None = None,
        *,
        offset: int = 0,
        max_chars: int | None = None,
        execute: bool = False,
        args: Sequence[str] = (),
        timeout: float | None = None,
        abort: AbortToken | None = None,
    ) -> SkillOutput:
        """Read or run, as the module says; ``abort`` kills a running script.

        Raises:
            SkillNotFound: no skill of that name.
            BadResource: the resource is malformed, missing, outside the skill, or may not run.
            UsageError: a parameter is out of range.
            ExecutionError: the script did not run to a clean end (see :mod:`.runner`).
        """
        limit = self.host.config.skills.max_chars if max_chars is None else max_chars
        if offset < 0 or limit <= 0:
            raise UsageError(f"offset must be >= 0 and max_chars > 0; got {offset}, {limit}")
        if not all(isinstance(arg, str) for arg in args):
            raise UsageError("args must be a list of strings")
        skill = self.catalog().get(skill_name)
        if execute:
            return self._run(skill, resource, tuple(args), timeout, limit, abort)
        if resource is None:
            files = "\n".join(f"- {path}" for path in resources.listing(skill))
            text = (
                f"# {skill.name}\n\n{skill.description}\n\n{skill.body.strip()}\n\nFiles:\n{files}"
            )
        else:
            text = resources.read_text(resources.resolve(skill, resource))
        # A skill's text is somebody else's words to the run (the breaker counts it).
        self.host.breaker.words("skill", f"{skill.name}: {resource or 'SKILL.md'}")
        window = text[offset : offset + limit]
        end = offset + len(window)
        return SkillOutput(
            skill.name,
            resource,
            text=window,
            total_chars=len(text),
            next_offset=end if end < len(text) else None,
        )

    def _run(  # noqa: PLR0917 - the call's own parameters, passed on
        self,
        skill: Skill,
        resource: str | None,
        args: tuple[str, ...],
        timeout: float | None,
        limit: int,
        abort: AbortToken | None,
    ) -> SkillOutput:
        if resource is None:
            raise BadResource(
                "execute needs a resource: the script to run",
                hint="name it, e.g. resource = scripts/run.py",
                details={"skill": skill.name},
            )
        name = skill.name
        path = resources.resolve(skill, resource)
        if not resources.executable(resource):
            kind = resources.kind_of(resource)
            raise BadResource(
                f"{resource} of skill {name!r} is a {kind} file, which is read, never run",
                hint="only files under scripts/ (or a folder the specification does not name) run",
                details={"skill": name, "resource": resource, "kind": kind},
            )
        command = runner.interpreter(path)
        if command is None:
            raise ExecutionError(
                f"skill script {path} names no interpreter: no #! line and no known extension",
                hint=f"give it a #! line or one of {', '.join(sorted(runner.INTERPRETERS))}",
                details={"skill": name, "script": resource, "path": path},
            )
        gate = self.gate(skill_safe_mode=skill.safe_mode, interpreter=command[0])
        result, left_out = runner.execute(
            self.host,
            skill,
            resource,
            gate,
            command,
            profile=self.profile.name,
            args=args,
            timeout=timeout,
            origin=self.origin,
            preapproved=self.preapproved,
            abort=abort,
        )
        facts = {"skill": skill.name, "script": resource}
        text = runner.envelope(result, facts, limit)
        return SkillOutput(
            skill.name,
            resource,
            text=text,
            total_chars=len(text),
            result=result,
            left_out=tuple(left_out),
        )
