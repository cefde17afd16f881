"""``stockade mcp``: an agent's commands and file tools over MCP, on stdio.

One :class:`~stockade.host.Host` serves the whole connection: its commands are the steps of
one run, its background tasks belong to this connection alone (an owner token made here,
never taken from the client), and closing it when the client leaves kills whatever still
runs. Every request has ``origin="mcp"`` and the agent profile the server was started with.

The server's stdout is the protocol. Commands run with captured pipes; while the server
runs, file descriptor 1 points at stderr (the SDK's stdio transport does that) and
``sys.stdout`` is stderr too, so nothing printed in this process can reach the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio
import attrs
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params

from stockade import __version__
from stockade.errors import PolicyDenied, PolicyHeld, StockadeError, UsageError
from stockade.executor import AbortToken
from stockade.types import ExecRequest
from stockade.wire import plain

from . import render, skills
from .tools import TOOLS

if TYPE_CHECKING:
    from stockade.files import Workspace
    from stockade.host import Host
    from stockade.types import RunResult

T = TypeVar("T")
Context = ServerRequestContext[Any, Any]
Outcome = types.CallToolResult | types.InputRequiredResult
Handler = Callable[[Context, Mapping[str, Any]], Awaitable[Outcome]]

logger = logging.getLogger("stockade_mcp")

PROGRESS_EVERY = 1.0
"""Seconds between two progress notifications of a running command."""

APPROVAL = "approval"
"""The key of the approval question in an ``InputRequiredResult``."""
MAX_ASKED = 64
"""Approvals asked in-band and not answered yet that a connection keeps."""

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

INSTRUCTIONS = (
    "Stockade runs commands for you by argv, never through a shell: pass the program and "
    "each argument as separate strings. Commands are confined to the agent's workspace, "
    "bounded in time and output, and recorded. A command that needs a person's approval "
    "is asked about, or held; a held one says how a person runs it."
)


Call = tuple[str, dict[str, Any]]
"""A tool call: its tool's name and its arguments."""


@attrs.frozen
class _Asked:
    run_id: str
    step: int
    call: Call


class Service:
    """The tools of one MCP connection, over one host.

    Args:
        host: the host every command runs through (the caller closes it).
        agent: the agent profile of every request.
        owner: the owner token of this connection's background tasks.
    """

    def __init__(
        self,
        host: Host,
        *,
        agent: str = "default",
        owner: str | None = None,
        unsafe_skills: bool = False,
    ) -> None:
        self.host = host
        self.agent = agent
        self.unsafe_skills = unsafe_skills
        self._skill_tool = skills.tool()
        self.owner = owner if owner is not None else secrets.token_hex(16)
        self._workspace: Workspace | None = None
        self._asked: dict[str, _Asked] = {}
        self._opening = threading.Lock()
        self._handlers: dict[str, Handler] = {
            "run_command": self.run_command,
            "start_command": self.start_command,
            "read_output": self.read_output,
            "kill_command": self.kill_command,
            "list_commands": self.list_commands,
            "file_list": self.file_list,
            "file_read": self.file_read,
            "file_write": self.file_write,
        }
        if self._skill_tool is not None:
            self._handlers["skill"] = self.skill

    def close(self) -> None:
        """Release the workspace's descriptor."""
        if self._workspace is not None:
            self._workspace.close()
            self._workspace = None

    # --- the protocol side -----------------------------------------------------------

    def server(self) -> Server[Any]:
        """A low-level MCP server whose tools are this service's."""

        async def list_tools(
            _ctx: Context, _params: types.PaginatedRequestParams | None
        ) -> types.ListToolsResult:
            extra = [self._skill_tool] if self._skill_tool is not None else []
            return types.ListToolsResult(tools=[*TOOLS, *extra])

        async def call_tool(ctx: Context, params: types.CallToolRequestParams) -> Outcome:
            return await self.call(ctx, params.name, params.arguments or {}, params)

        return Server(
            "stockade",
            version=__version__,
            title="Stockade",
            description="Run an agent's commands by argv: classified, approved, confined.",
            instructions=INSTRUCTIONS,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )

    async def call(
        self,
        ctx: Context,
        name: str,
        arguments: Mapping[str, Any],
        params: types.CallToolRequestParams | None = None,
    ) -> Outcome:
        """Run tool ``name``; a Stockade error becomes a tool error, not a protocol one.

        ``params`` carries a retried call's answers to an approval asked in-band (the
        2026-07-28 protocol's ``InputRequiredResult``).
        """
        handler = self._handlers.get(name)
        try:
            if handler is None:
                raise UsageError(
                    f"there is no tool {name!r}",
                    hint=f"the tools are {', '.join(self._handlers)}",
                )
            if params is not None and params.request_state is not None:
                return await self.answered(ctx, name, arguments, params)
            return await handler(ctx, arguments)
        except StockadeError as error:
            return failure(error)
        except Exception as error:
            logger.exception("tool %s failed", name)
            return types.CallToolResult(
                content=[text(f"stockade: internal error: {type(error).__name__}: {error}")],
                structured_content={"code": "internal", "message": str(error)},
                is_error=True,
            )

    # --- commands --------------------------------------------------------------------

    def request(self, arguments: Mapping[str, Any]) -> ExecRequest:
        """The request a tool call names: argv, cwd and timeout, with this agent's profile."""
        argv = arguments.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise UsageError(
                "argv must be a non-empty list of strings",
                hint='pass the program and each argument separately: ["git", "status"]',
            )
        cwd = arguments.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise UsageError("cwd must be a string")
        timeout = arguments.get("timeout")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise UsageError("timeout must be a positive number of seconds")
        try:
            return ExecRequest(
                argv,
                cwd=cwd,
                timeout=None if timeout is None else float(timeout),
                origin="mcp",
                profile=self.agent,
            )
        except (TypeError, ValueError) as error:
            raise UsageError(f"the request is malformed: {error}") from None

    async def run_command(self, ctx: Context, arguments: Mapping[str, Any]) -> Outcome:
        """Run one command and wait; a cancelled call kills it."""
        request = self.request(arguments)
        try:
            result = await with_progress(ctx, settle_task(self.host.run_async(request)))
        except PolicyHeld as held:
            return await self.approve(ctx, held, ("run_command", dict(arguments)))
        return success(result)

    async def start_command(self, ctx: Context, arguments: Mapping[str, Any]) -> Outcome:
        """Start a command in the background as a task of this connection."""
        request = self.request(arguments)
        try:
            info = await asyncio.to_thread(self.host.start, request, owner=self.owner)
        except PolicyHeld as held:
            return await self.approve(ctx, held, ("start_command", dict(arguments)))
        return types.CallToolResult(
            content=[text(f"started {render.task_line(info)}\nread it with read_output")],
            structured_content=render.jsonable(plain(info)),
        )

    async def read_output(
        self, _ctx: Context, arguments: Mapping[str, Any]
    ) -> types.CallToolResult:
        """What a task printed since the previous read."""
        output = await asyncio.to_thread(
            self.host.read_output, task_id(arguments), owner=self.owner
        )
        return types.CallToolResult(
            content=[text(render.output_text(output))],
            structured_content=render.jsonable(plain(output)),
        )

    async def kill_command(
        self, _ctx: Context, arguments: Mapping[str, Any]
    ) -> types.CallToolResult:
        """Kill a task; returns once it ended."""
        info = await asyncio.to_thread(self.host.kill, task_id(arguments), owner=self.owner)
        return types.CallToolResult(
            content=[text(render.task_line(info))],
            structured_content=render.jsonable(plain(info)),
        )

    async def list_commands(
        self, _ctx: Context, _arguments: Mapping[str, Any]
    ) -> types.CallToolResult:
        """This connection's tasks."""
        tasks = await asyncio.to_thread(self.host.list_tasks, owner=self.owner)
        lines = [render.task_line(info) for info in tasks] or ["no tasks"]
        return types.CallToolResult(
            content=[text("\n".join(lines))],
            structured_content={"tasks": render.jsonable([plain(info) for info in tasks])},
        )

    # --- approval --------------------------------------------------------------------

    async def approve(self, ctx: Context, held: PolicyHeld, call: Call) -> Outcome:
        """Ask the client's person about a held step; run it if they approve.

        On a connection of the handshake era the server asks with ``elicitation/create``
        and waits for the answer. On a 2026-07-28 connection, which has no requests from
        the server, it answers the call with an ``InputRequiredResult`` holding the same
        question; the client asks its person and calls again with the answer. Without
        elicitation the held step is reported as it is: it waits for
        ``stockade approve RUN STEP``.
        """
        run_id, step = held.details.get("run_id"), held.details.get("step")
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
        return await self.decided(ctx, held.details, answer)

    def question(self, run_id: str, step: int) -> str:
        """What a person is asked: exactly what would run, where, and why it asks."""
        from stockade.builtin.approval import describe
        from stockade.types import PendingApproval

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
        return await self.decided(ctx, details, answer)

    async def decided(
        self, ctx: Context, details: Mapping[str, object], answer: types.ElicitResult
    ) -> types.CallToolResult:
        """Record the person's answer to a held step; run the step when they approved.

        A held step runs when it is approved, in the foreground, even one that
        ``start_command`` asked for.
        """
        run_id, step = str(details["run_id"]), int(str(details["step"]))
        by = f"mcp-elicitation:{client_name(ctx)}"
        content = answer.content or {}
        if answer.action != "accept" or content.get("approve", True) is False:
            await asyncio.to_thread(self.host.answer, run_id, step, approve=False, by=by)
            return failure(
                PolicyDenied(
                    f"declined by {by} ({answer.action}): the command did not run",
                    details={**details, "answer": answer.action},
                )
            )
        await asyncio.to_thread(self.host.answer, run_id, step, approve=True, by=by)
        token = AbortToken()
        try:
            result = await with_progress(
                ctx, settle_thread(lambda: self.host.resume(run_id, step, abort=token), token)
            )
        finally:
            token.close()
        return success(result, lead=f"approved by {by}; ")

    # --- files -----------------------------------------------------------------------

    def workspace(self) -> Workspace:
        """The agent's workspace (else the current directory), opened once."""
        with self._opening:
            if self._workspace is None:
                from stockade.files import Workspace
                from stockade.workspaces import workspace_of

                profile = self.host.config.profile(self.agent)
                root = workspace_of(self.host.config, profile) or os.getcwd()
                self._workspace = Workspace(root, quota_mb=profile.quota_mb)
            return self._workspace

    async def file_list(self, _ctx: Context, arguments: Mapping[str, Any]) -> types.CallToolResult:
        """A folder's entries."""
        path = string(arguments, "path", default=".")
        listing = await asyncio.to_thread(lambda: self.workspace().file_list(path))
        lines = [render.entry_line(entry) for entry in listing.entries]
        if listing.truncated:
            lines.append("[more entries than the limit; not all are listed]")
        return types.CallToolResult(
            content=[text("\n".join(lines) or f"{listing.path} is empty")],
            structured_content=render.jsonable(plain(listing)),
        )

    async def file_read(self, _ctx: Context, arguments: Mapping[str, Any]) -> types.CallToolResult:
        """Part of a text file, or a binary file described."""
        from stockade.files import READ_LIMIT

        path = string(arguments, "path")
        offset, limit = arguments.get("offset", 0), arguments.get("limit", READ_LIMIT)
        if not isinstance(offset, int) or not isinstance(limit, int):
            raise UsageError("offset and limit must be integers (bytes)")
        read = await asyncio.to_thread(
            lambda: self.workspace().file_read(path, offset=offset, limit=limit)
        )
        shown = read.text if read.text is not None else (read.description or "")
        if read.truncated:
            shown += f"\n[more follows: read on with offset {read.offset + read.returned}]"
        return types.CallToolResult(
            content=[text(shown)], structured_content=render.jsonable(plain(read))
        )

    async def file_write(self, _ctx: Context, arguments: Mapping[str, Any]) -> types.CallToolResult:
        """Replace a whole file, atomically."""
        path, content = string(arguments, "path"), string(arguments, "content")
        written = await asyncio.to_thread(lambda: self.workspace().file_write(path, content))
        what = "created" if written.created else ("changed" if written.changed else "unchanged")
        return types.CallToolResult(
            content=[text(f"{what}: {written.path} ({written.new_size} bytes)")],
            structured_content=render.jsonable(plain(written)),
        )

    # --- skills ----------------------------------------------------------------------

    async def skill(self, ctx: Context, arguments: Mapping[str, Any]) -> types.CallToolResult:
        """Read a skill, or run one of its scripts; a cancelled call kills the script."""
        tool = skills.make(self.host, agent=self.agent, unsafe=self.unsafe_skills)
        token = AbortToken()
        try:
            work = settle_thread(lambda: skills.call(tool, arguments, token), token)
            return await with_progress(ctx, work)
        finally:
            token.close()


# --- results ---------------------------------------------------------------------------


def text(value: str) -> types.TextContent:
    """A text block."""
    return types.TextContent(type="text", text=value)


def success(result: RunResult, *, lead: str = "") -> types.CallToolResult:
    """A command's result: the whole of it as data, its status and output as text.

    A command that ran is a success of the tool, whatever its exit status.
    """
    return types.CallToolResult(
        content=[text(lead + render.result_text(result))],
        structured_content=render.jsonable(plain(result)),
    )


def failure(error: StockadeError) -> types.CallToolResult:
    """A tool error: the error's ``to_dict()`` as data, its message and hint as text."""
    return types.CallToolResult(
        content=[text(render.error_text(error))],
        structured_content=render.jsonable(error.to_dict()),
        is_error=True,
    )


def task_id(arguments: Mapping[str, Any]) -> str:
    """The ``task_id`` argument."""
    return string(arguments, "task_id")


def string(arguments: Mapping[str, Any], name: str, *, default: str | None = None) -> str:
    """A string argument, or a usage error."""
    value = arguments.get(name, default)
    if not isinstance(value, str):
        raise UsageError(f"{name} must be a string")
    return value


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


# --- running without leaking -----------------------------------------------------------


async def with_progress(ctx: Context, work: Awaitable[T]) -> T:
    """Await ``work``; meanwhile, when the client asked for progress, report the seconds
    elapsed every :data:`PROGRESS_EVERY` seconds."""
    if progress_token_from_params(ctx.params) is None:
        return await work
    started = time.monotonic()

    async def tick() -> None:
        while True:
            await anyio.sleep(PROGRESS_EVERY)
            elapsed = time.monotonic() - started
            try:
                await ctx.session.report_progress(elapsed, None, f"running for {elapsed:.0f} s")
            except Exception:
                logger.debug("a progress notification was not sent", exc_info=True)

    # A plain task, not a task group's: an error of ``work`` propagates as itself.
    ticker = asyncio.ensure_future(tick())
    try:
        return await work
    finally:
        ticker.cancel()


async def settle_task(work: Coroutine[Any, Any, T]) -> T:
    """Await ``work`` as a task of its own; when the caller is cancelled, cancel it once
    and wait until it has finished (for a command: until it was killed), then re-raise.

    The SDK cancels a handler through anyio, which cancels again at every await inside the
    cancelled scope; the task of its own sees a single, plain asyncio cancellation, so its
    clean-up (killing the command, closing the record) runs to its end.
    """
    task = asyncio.ensure_future(work)
    return await _settle(task, task.cancel)


async def settle_thread(work: Callable[[], T], token: AbortToken) -> T:
    """Run ``work`` on a thread; when the caller is cancelled, abort ``token`` and wait for
    the thread to finish, then re-raise."""
    future = asyncio.get_running_loop().run_in_executor(None, work)
    return await _settle(future, token.abort)


async def _settle(future: asyncio.Future[T], stop: Callable[[], object]) -> T:
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        stop()
        with anyio.CancelScope(shield=True):
            await asyncio.wait([future])
        if not future.cancelled():
            future.exception()  # retrieved: the caller's cancellation is what propagates
        raise


# --- the process -----------------------------------------------------------------------


class StdinLines:
    """The lines of standard input, read without a thread, so a signal can end the server.

    The SDK's transport reads stdin on a worker thread that nothing can interrupt: a
    server told to stop would wait for the client's next line. This reader waits for fd 0
    to be readable in the event loop instead, from a private duplicate; fd 0 itself then
    points at the null device, as the SDK would make it.
    """

    def __init__(self) -> None:
        import fcntl

        self._fd = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
        os.set_blocking(self._fd, False)
        self._buffer = b""
        self._eof = False

    @staticmethod
    def pollable() -> bool:
        """Whether stdin is a pipe or a socket, as a client makes it.

        A regular file cannot be polled, and a terminal is left alone: it would be made
        non-blocking for the shell that shares it.
        """
        import stat

        try:
            mode = os.fstat(0).st_mode
        except OSError:
            return False
        return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        while b"\n" not in self._buffer:
            if self._eof:
                if not self._buffer:
                    raise StopAsyncIteration
                line, self._buffer = self._buffer, b""
                return line.decode("utf-8", "replace")
            await anyio.wait_readable(self._fd)
            try:
                chunk = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                continue
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", "replace") + "\n"

    def close(self) -> None:
        """Point fd 0 back at the real stdin."""
        if self._fd >= 0:
            os.set_blocking(self._fd, True)
            os.dup2(self._fd, 0)
            os.close(self._fd)
            self._fd = -1


async def serve(host: Host, *, agent: str = "default", unsafe_skills: bool = False) -> None:
    """Serve MCP on stdin/stdout until the client leaves (or SIGTERM, SIGHUP, SIGINT)."""
    service = Service(host, agent=agent, unsafe_skills=unsafe_skills)
    server = service.server()
    stdin = StdinLines() if StdinLines.pollable() else None
    try:
        # The signal's cancel must reach the transport's own tasks too: on its way out,
        # the transport waits for end of input.
        async with anyio.create_task_group() as group:
            group.start_soon(_stop_on_signal, group.cancel_scope)
            async with stdio_server(stdin=cast("Any", stdin)) as (read_stream, write_stream):
                # Past this point fd 1 is stderr; sys.stdout is too, in case fd 1 could not
                # be moved and the transport writes the wire through it.
                with contextlib.redirect_stdout(sys.stderr):
                    await server.run(
                        read_stream, write_stream, server.create_initialization_options()
                    )
            group.cancel_scope.cancel()
    finally:
        service.close()
        if stdin is not None:
            stdin.close()


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP, signal.SIGINT) as signals:
        async for number in signals:
            logger.warning("%s: stopping", signal.Signals(number).name)
            scope.cancel()
            return


def main(*, config: str | None = None, agent: str = "default", unsafe_skills: bool = False) -> int:
    """``stockade mcp``: build the host, serve until the client leaves, close the host.

    Returns the exit status: 0 once the client has left, 125 when the host cannot be built.
    """
    from stockade.host import Host

    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="stockade mcp: %(levelname)s: %(message)s"
    )
    try:
        host = Host.from_environment(config)
    except StockadeError as error:
        print(f"stockade: error[{error.code}]: {error.message}", file=sys.stderr)
        if error.hint:
            print(f"  hint: {error.hint}", file=sys.stderr)
        return error.exit_status
    try:
        host.config.profile(agent)
        anyio.run(lambda: serve(host, agent=agent, unsafe_skills=unsafe_skills), backend="asyncio")
    except StockadeError as error:
        print(f"stockade: error[{error.code}]: {error.message}", file=sys.stderr)
        return error.exit_status
    finally:
        host.close()
    return 0
