"""The six seams of Stockade, and the front ends' offers, as pluggy hook specifications.

Each docstring ends with the calling convention. Plugins implement these with
:data:`stockade.hookimpl`; the host calls them only through :class:`stockade.plugin.manager.Hooks`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import pluggy

from .. import NAME
from ..confine.provider import SandboxProvider
from ..request.literals import ClassifierRule
from ..request.result import PendingApproval
from ..request.spec import ExecSpec, Profile
from ..request.verdict import Classification, Decision
from ..run.executor import Executor

if TYPE_CHECKING:
    from ..frontends import CliCommand, McpTool
    from ..record.events import Event

hookspec = pluggy.HookspecMarker(NAME)

# --- executor ----------------------------------------------------------------------------


@hookspec
def stockade_register_executors(register: Callable[[type[Executor]], None]) -> None:
    """Register executor classes by calling ``register(cls)`` for each.

    Each class carries a unique ``PLUGIN_NAME``; configuration (``executor = "local"``)
    selects one. A name registered twice is an error.

    Convention: all implementations are called; the return value is ignored.
    """


# --- sandbox provider --------------------------------------------------------------------


@hookspec
def stockade_register_sandboxes(register: Callable[[type[SandboxProvider]], None]) -> None:
    """Register sandbox provider classes by calling ``register(cls)`` for each.

    Configuration (``sandbox = "bubblewrap"``) selects one by ``PLUGIN_NAME``; ``auto``
    picks the usable provider with the highest ``PRIORITY`` that supports the mode.

    Convention: all implementations are called; the return value is ignored.
    """


# --- classifier --------------------------------------------------------------------------


@hookspec
def stockade_classifier_rules() -> Mapping[str, ClassifierRule] | None:
    """Extend the classifier's table: program name -> ``rule(args) -> (kind, why)``.

    A rule decides for the program it names, after wrappers are seen through, over the
    built-in table; it cannot make a shell or an interpreter given inline code anything but
    ``destroys``. Two plugins naming the same program is an error.

    Convention: all implementations are called once per host; the tables are merged.
    """


@hookspec
def stockade_classify(spec: ExecSpec, rules: Mapping[str, ClassifierRule]) -> Classification | None:
    """Judge what the command may affect: ``reads``, ``writes``, ``network``, ``destroys``.

    ``rules`` is the merged table from :func:`stockade_classifier_rules`, for classifiers
    that keep one (an implementation may leave the argument out). Return ``None`` to
    abstain. With no votes at all the command counts as ``writes``.

    Convention: all results are merged: the most severe kind wins, every reason is kept.
    """


# --- approval ----------------------------------------------------------------------------


@hookspec(firstresult=True)
def stockade_decide(
    spec: ExecSpec, classification: Classification, profile: Profile
) -> Decision | None:
    """Decide ``allow``, ``ask`` or ``deny`` for the command under the agent's profile.

    The built-in policy runs last (``trylast``): it applies the profile's rules (autonomy,
    programs, budget, ask) in order. Whatever a policy decides, a command that asks for a
    writable grant waits for a person.

    Convention: firstresult: the first non-None wins.
    """


@hookspec(firstresult=True)
def stockade_ask(pending: PendingApproval) -> Decision | None:
    """Ask a person about a held command; return their ``allow`` or ``deny``.

    Return ``None`` when this approver cannot reach a person; with no answer at all the
    command is held (:class:`~stockade.errors.PolicyHeld`) and does not run.

    Convention: firstresult: the first non-None wins.
    """


# --- credential broker -------------------------------------------------------------------


@hookspec(firstresult=True)
def stockade_resolve_credential(handle: str, spec: ExecSpec) -> str | None:
    """Turn a credential handle into its secret value, at spawn time only.

    The value goes into the child's environment (or, for a handle the profile binds to a
    host, only to the egress proxy, which injects it) and is redacted from the kept output;
    it never appears in the spec, the events or the result.

    Convention: firstresult: the first non-None wins.
    """


# --- recorder ----------------------------------------------------------------------------


@hookspec
def stockade_record(event: Event) -> None:
    """Receive every event: action, permission, result and error, paired by ``action_id``.

    A recorder that raises before the command runs stops it from running; one that raises
    afterwards is reported with the result kept.

    Convention: observer: every implementation sees every event; the return value is ignored.
    """


@hookspec
def stockade_record_batch(events: Sequence[Event]) -> None:
    """Receive events that belong together, in order, to keep all of them or none.

    The host hands over together what must land as one: a command's action and its decision
    (stored before the command starts), its result and the taints it adds, a driver's
    collected results. A recorder that implements this hook gets every event through it
    (outside a batch, one at a time) and :func:`stockade_record` is not called for it; a
    recorder that implements only :func:`stockade_record` gets each event through that, in
    the same order. Raising refuses the whole batch, as :func:`stockade_record` refuses
    one event.

    Convention: observer: every implementation sees every batch; the return value is ignored.
    """


# --- front ends --------------------------------------------------------------------------


@hookspec
def stockade_cli_commands(add: Callable[[CliCommand], None]) -> None:
    """Offer ``stockade`` subcommands by calling ``add(command)`` for each.

    Asked only when the command line names no built-in command (or asks for help), so the
    offer must be cheap: import the command's code inside its handler. A name a built-in
    command or another plugin already has is an error naming both.

    Convention: all implementations are called; the return value is ignored.
    """


@hookspec
def stockade_mcp_tools(add: Callable[[McpTool], None]) -> None:
    """Offer tools to ``stockade mcp`` by calling ``add(tool)`` for each.

    Asked when ``stockade mcp`` builds its options and when its server starts. A name the
    server's own tools (``run_command``, ..., ``file_write``) or another plugin has is an
    error naming both.

    Convention: all implementations are called; the return value is ignored.
    """
