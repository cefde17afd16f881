"""Approvals over MCP: a held step asked about by elicitation (a request, or in-band on the
2026-07-28 protocol), run once approved (``start_command``'s as a background task), and
expired, recorded, when the session that held it ends unanswered."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
from mcp import types
from mcp.shared.exceptions import MCPError

from stockade.errors import PolicyDenied, PolicyHeld, RecorderFailed, StockadeError, UsageError
from stockade.run.executor import AbortToken

from . import render
from .results import Outcome, failure, ok, success
from .running import settle_thread, with_progress

if TYPE_CHECKING:
    from stockade.host import Host
    from stockade.request.result import RunResult
    from stockade.run.tasks import TaskInfo

    from .running import Context

logger = logging.getLogger("stockade_mcp")

APPROVAL = "approval"
"""The key of the approval question in an ``InputRequiredResult``."""
MAX_ASKED = 64
"""Approvals asked in-band and not answered yet that a connection keeps."""
EXPIRED = "stockade-mcp (the MCP session that asked for it ended)"
"""Who answered a held step its session left unanswered (the store's ``answered_by``)."""

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Run this command",
            "description": "leave checked to run it exactly as shown",
            "default": True,
        }
    },
}
"""What an approval asks for: accepting the form runs the command, unless it says false."""

Call = tuple[str, dict[str, Any]]
"""A tool call: its tool's name and its arguments."""


@attrs.frozen
class _Asked:
    run_id: str
    step: int
    call: Call


class Approvals:
    """The approval side of a connection's service (a mixin of :class:`~.server.Service`)."""

    host: Host
    owner: str

    def __init__(self) -> None:
        self._asked: dict[str, _Asked] = {}
        self._held: dict[tuple[str, int], None] = {}

    async def approve(self, ctx: Context, held: PolicyHeld, call: Call) -> Outcome:
        """Ask the client's person about a held step; run it if they approve.

        On a connection of the handshake era the server asks with ``elicitation/create``
        and waits for the answer. On a 2026-07-28 connection, which has no requests from
        the server, it answers the call with an ``InputRequiredResult`` holding the same
        question; the client asks its person and calls again with the answer. Without
        elicitation the held step is reported as it is: it waits for
        ``stockade approve RUN STEP`` while this session lasts.
        """
        run_id, step = held.details.get("run_id"), held.details.get("step")
        if isinstance(run_id, str) and isinstance(step, int):
            self._held[run_id, step] = None
        if not isinstance(run_id, str) or not isinstance(step, int) or not can_elicit(ctx):
            return failure(held)
        question = await asyncio.to_thread(self.question, run_id, step)
        if not ctx.session.can_send_request:
            ask = types.ElicitRequest(
                params=types.ElicitRequestFormParams(
                    message=question, requested_schema=APPROVAL_SCHEMA
                )
            )
            return types.InputRequiredResult(
                input_requests={APPROVAL: ask}, request_state=self._ask_later(run_id, step, call)
            )
        try:
            answer = await ctx.session.elicit_form(
                question, APPROVAL_SCHEMA, related_request_id=ctx.request_id
            )
        except MCPError as error:
            logger.warning("the client could not ask for approval: %s", error)
            return failure(held)
        return await self.decided(ctx, held.details, answer, call)

    def question(self, run_id: str, step: int) -> str:
        """What a person is asked: exactly what would run, where, and why it asks."""
        from stockade.policy.prompt import describe
        from stockade.request.result import PendingApproval

        waiting = self.host.store.get(run_id, step)
        shown = describe(PendingApproval(waiting.spec, waiting.classification, waiting.decision))
        return f"An agent's command waits for your approval (Stockade).\n{shown}"

    def _ask_later(self, run_id: str, step: int, call: Call) -> str:
        """An opaque token for a question asked in-band; the step it names stays here."""
        state = secrets.token_urlsafe(24)
        self._asked[state] = _Asked(run_id, step, call)
        while len(self._asked) > MAX_ASKED:
            del self._asked[next(iter(self._asked))]
        return state

    async def answered(
        self,
        ctx: Context,
        name: str,
        arguments: Mapping[str, Any],
        params: types.CallToolRequestParams,
    ) -> types.CallToolResult:
        """A call retried with the answer to an approval asked in-band.

        The state must be one this connection gave for exactly this call (tool and
        arguments); anything else is refused, and nothing is answered.
        """
        asked = self._asked.get(params.request_state or "")
        if asked is None or asked.call != (name, dict(arguments)):
            raise UsageError(
                "the call carries an approval state this server did not give for this call",
                hint="call the tool again without request_state",
            )
        del self._asked[params.request_state or ""]
        answer = (params.input_responses or {}).get(APPROVAL)
        if not isinstance(answer, types.ElicitResult):
            answer = types.ElicitResult(action="cancel")
        details = {"run_id": asked.run_id, "step": asked.step, "argv": arguments.get("argv")}
        return await self.decided(ctx, details, answer, asked.call)

    async def decided(
        self,
        ctx: Context,
        details: Mapping[str, object],
        answer: types.ElicitResult,
        call: Call,
    ) -> types.CallToolResult:
        """Record the person's answer to a held step; run the step when they approved:
        in the foreground for ``run_command``, as a background task for ``start_command``."""
        run_id, step = str(details["run_id"]), int(str(details["step"]))
        by = f"mcp-elicitation:{client_name(ctx)}"
        content = answer.content or {}
        if answer.action != "accept" or content.get("approve", True) is False:
            reason = {"accept": "declined", "decline": "declined", "cancel": "cancelled"}
            await asyncio.to_thread(
                lambda: self.host.answer(
                    run_id, step, approve=False, by=by, reason=reason[answer.action]
                )
            )
            how = {
                "accept": f"declined by {by} (the form's approve box was unchecked)",
                "decline": f"declined by {by}",
                "cancel": f"cancelled by {by} (the question was dismissed)",
            }[answer.action]
            return failure(
                PolicyDenied(
                    f"{how}: the command did not run",
                    hint="ask the person why, or do without this command",
                    details={**details, "answer": answer.action},
                )
            )
        await asyncio.to_thread(self.host.answer, run_id, step, approve=True, by=by)
        if call[0] == "start_command":
            info = await asyncio.to_thread(self._start_approved, run_id, step, call)
            return ok(
                f"approved by {by}; started {render.task_line(info)}\nread it with read_output",
                info,
            )
        token = AbortToken()
        try:
            result = await with_progress(
                ctx, settle_thread(lambda: self.host.resume(run_id, step, abort=token), token)
            )
        except PolicyHeld as again:  # its run came to hold both kinds since: the breaker asks
            asked = await self.approve(ctx, again, call)
            return asked if isinstance(asked, types.CallToolResult) else failure(again)
        finally:
            token.close()
        self.keep(result)
        return success(result, lead=f"approved by {by}; ")

    def keep(self, result: RunResult) -> None:
        """Overridden by the service: remember a result for ``read_output``."""

    def _start_approved(self, run_id: str, step: int, call: Call) -> TaskInfo:
        """Start an approved step as a background task of this connection (a TaskInfo)."""
        host = self.host

        def runner(abort: AbortToken, on_output: Callable[[str, bytes], None]) -> RunResult:
            return host.resume(run_id, step, abort=abort, on_output=on_output)

        return host.tasks.start(self.owner, tuple(call[1]["argv"]), runner)

    def expire_held(self) -> list[tuple[str, int]]:
        """Decline, recorded as expired, every step this session held that nobody answered
        (the session ends; no one is left to read its result). Returns those expired."""
        expired = []
        for run_id, step in list(self._held):
            try:
                if self.host.store.get(run_id, step).state != "held":
                    continue
                self.host.answer(run_id, step, approve=False, by=EXPIRED, reason="expired")
            except RecorderFailed:
                logger.exception("step %s of run %s expired, unrecorded", step, run_id)
            except StockadeError:
                continue  # answered by a person meanwhile: theirs stands
            expired.append((run_id, step))
        self._held.clear()
        return expired


def can_elicit(ctx: Context) -> bool:
    """Whether the client declared form elicitation (asked in-band or by a request)."""
    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.elicitation is None:
        return False
    modes = capabilities.elicitation
    # An empty elicitation capability means form mode (the spec's backward compatibility).
    return modes.form is not None or modes.url is None


def client_name(ctx: Context) -> str:
    """The client's name from its ``initialize``, else ``unknown-client``."""
    params = ctx.session.client_params
    return params.client_info.name if params is not None else "unknown-client"
