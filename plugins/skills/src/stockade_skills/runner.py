"""Running one skill script: its interpreter, its copy, the host's path, its envelope.

A script never gets a subprocess of its own: it becomes one ``ExecRequest`` (interpreter,
script, args) that goes through the host like any agent command, classified, decided by the
policy, confined by the sandbox, bounded and recorded, with the gate's decision in front.
It runs in a fresh copy of the skill made for this invocation inside the agent's
workspace (the sandbox's writable root), with the copy's root as the working directory so
that ``references/`` and ``assets/`` resolve by relative path. The copy is removed on every
path out: a clean end, a non-zero exit, a timeout, a refusal or an error.
"""

from __future__ import annotations

import os
import tempfile

from stockade.errors import PolicyDenied, PolicyHeld, ProgramNotFound, StockadeError
from stockade.host import Host
from stockade.request.literals import Origin
from stockade.request.result import RunResult
from stockade.request.spec import ExecRequest
from stockade.run.executor import AbortToken
from stockade.workspace.folders import workspace_of

from . import resources
from .errors import ExecutionError
from .gate import Gate
from .model import Skill

# By extension, when the script has no ``#!`` line.
INTERPRETERS = {
    ".py": "python3",
    ".sh": "sh",
    ".bash": "bash",
    ".js": "node",
    ".mjs": "node",
    ".cjs": "node",
    ".rb": "ruby",
    ".pl": "perl",
    ".php": "php",
    ".lua": "lua",
}
TAG = "SKILL_SCRIPT_EXECUTED"


def interpreter(path: str) -> tuple[str, ...] | None:
    """The program (and its options) that runs the script at ``path``: from its ``#!`` line,
    else from its extension; ``None`` when neither names one.

    A ``#!`` program is taken by its name (``/usr/bin/python3`` -> ``python3``), so that the
    agent's profile and the sandbox's ``PATH`` decide which one runs; ``#!/usr/bin/env [-S]
    PROGRAM ARGS`` names ``PROGRAM ARGS``.
    """
    with open(path, "rb") as handle:
        first = handle.readline(256)
    if first.startswith(b"#!"):
        words = first[2:].decode("utf-8", "replace").split()
        if words and os.path.basename(words[0]) == "env":
            words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        elif words:
            words = [os.path.basename(words[0]), *words[1:]]
        if words:
            return tuple(words)
    program = INTERPRETERS.get(os.path.splitext(path)[1].lower())
    return (program,) if program else None


def execute(
    host: Host,
    skill: Skill,
    resource: str,
    gate: Gate,
    command: tuple[str, ...],
    *,
    profile: str,
    args: tuple[str, ...] = (),
    timeout: float | None = None,
    origin: Origin = "api",
    preapproved: bool = False,
    abort: AbortToken | None = None,
) -> tuple[RunResult, list[str]]:
    """Run ``resource`` of ``skill`` with ``command`` (its interpreter) behind ``gate``.

    Returns the result and what the copy left out. Raises :class:`ExecutionError` for a
    shut gate, a refusal by the policy, a missing interpreter, a timeout and a non-zero exit.
    """
    script = os.path.join(skill.root, resource)
    facts = {"skill": skill.name, "script": resource, "path": script, "gate": gate.states()}
    if not gate.open:
        _refuse(host, command, script, args, gate, profile=profile, origin=origin)
    workspace = workspace_of(host.config, host.config.profile(profile)) or os.getcwd()
    tree = tempfile.mkdtemp(prefix=".stockade-skill-", dir=workspace)
    try:
        root, left_out = resources.materialize(skill, tree)
        request = ExecRequest(
            (*command, resource, *args),
            cwd=root,
            workspace=workspace,
            env={"STOCKADE_WORKSPACE": workspace},
            timeout=timeout,
            profile=profile,
            origin=origin,
            preapproved=preapproved,
            gate=gate.decision(),
        )
        try:
            result = host.run(request, abort=abort)
        except ProgramNotFound as error:
            raise _missing(command, facts, error) from None
        except PolicyHeld as error:
            raise _held(host, error, facts) from None
        except PolicyDenied as error:
            raise ExecutionError(
                f"the policy refused skill script {script}: {error.message}",
                hint="the gate is open, but the agent's profile must also allow the command",
                details={**facts, "policy": error.message},
            ) from None
    finally:
        resources.remove(tree)
    _check(result, facts)
    return result, left_out


def _refuse(
    host: Host,
    command: tuple[str, ...],
    script: str,
    args: tuple[str, ...],
    gate: Gate,
    *,
    profile: str,
    origin: Origin,
) -> None:
    """Record the shut gate's refusal through the host, then raise."""
    message = f"skill script {script} may not run: {gate.states()}"
    details = {"path": script, "gate": gate.states(), "fixes": gate.fixes()}
    try:
        host.run(
            ExecRequest(
                (*command, script, *args), profile=profile, origin=origin, gate=gate.decision()
            )
        )
    except PolicyDenied:
        pass
    except StockadeError as error:  # e.g. no such interpreter: still refused, and said so
        details["also"] = error.message
    raise ExecutionError(message, hint="; ".join(gate.fixes()), details=details)


def _missing(
    command: tuple[str, ...], facts: dict[str, str], error: StockadeError
) -> ExecutionError:
    return ExecutionError(
        f"the interpreter {command[0]} of skill script {facts['path']} is not installed "
        f"where the agent's commands run ({facts['gate']})",
        hint=f"install {command[0]}, or give the script a #! line naming one that is",
        details={**facts, "interpreter": command[0], "cause": error.message},
    )


def _held(host: Host, error: PolicyHeld, facts: dict[str, str]) -> ExecutionError:
    """A held script cannot be approved later: its copy is removed now. Decline the hold."""
    run, step = error.details.get("run_id"), error.details.get("step")
    if isinstance(run, str) and isinstance(step, int):
        host.answer(run, step, approve=False, by="stockade-skills (its copy was removed)")
    return ExecutionError(
        f"skill script {facts['path']} needs a person's approval: {error.message}",
        hint="run it where a person can answer (a terminal, an MCP client that asks), or "
        "approve it in advance with --yes",
        details={**facts, "policy": error.message},
    )


def _check(result: RunResult, facts: dict[str, str]) -> None:
    if result.aborted:
        raise ExecutionError(
            f"skill script {facts['path']} was cancelled and killed",
            hint="run it again if it is still needed",
            details={**facts, "result": envelope(result, facts, 4000)},
        )
    if result.timed_out:
        raise ExecutionError(
            f"skill script {facts['path']} timed out after {result.timeout_s:g} s and was killed",
            hint="pass a longer timeout (capped by the host's timeout.max), or make it faster",
            details={**facts, "result": envelope(result, facts, 4000)},
        )
    if result.exit_code != 0:
        how = f"exited {result.exit_code}" if result.exit_code is not None else result.signal
        raise ExecutionError(
            f"skill script {facts['path']} {how} ({facts['gate']})",
            hint="read its stderr in details.result; fix the arguments or the script",
            details={
                **facts,
                "exit_code": result.exit_code,
                "result": envelope(result, facts, 4000),
            },
        )


def envelope(result: RunResult, facts: dict[str, str], budget: int) -> str:
    """The script's output for the tool-call loop, at most about ``budget`` characters."""
    half = max(budget // 2, 200)
    parts = [f"[{TAG}]", f"skill: {facts['skill']}", f"script: {facts['script']}"]
    status = f"exit_code: {result.exit_code}" if result.exit_code is not None else result.signal
    parts.append(f"{status}; duration: {result.duration_ms:.0f} ms; timed_out: {result.timed_out}")
    for name, stream in (("stdout", result.stdout), ("stderr", result.stderr)):
        text = stream.text
        cut = ""
        if len(text) > half:
            cut = f"[... {len(text) - half} characters cut; the whole stream is in the record]\n"
            text = text[-half:]
        elif stream.truncated:
            cut = "[... the middle was cut; the whole stream is in the record]\n"
        parts += [f"--- {name} ({stream.total_bytes} bytes) ---", cut + text.rstrip("\n")]
    parts.append(f"[/{TAG}]")
    return "\n".join(parts)
