"""``stockade mcp``: an agent's commands and file tools over MCP, on stdio.

One :class:`~stockade.host.Host` serves the whole connection: its commands are the steps of
one run, its background tasks belong to this connection alone (an owner token made here,
never taken from the client), and closing it when the client leaves kills whatever still
runs and expires, recorded, the steps it held that nobody answered. Every request has
``origin="mcp"`` and the agent profile the server was started with, and stays inside the
workspace the server was started for.

The tools live by concern: :mod:`.commands` (commands, tasks, output), :mod:`.files`,
:mod:`.approval`; their schemas in :mod:`.tools`, their texts in :mod:`.render`. Plugins offer
more tools through the ``stockade_mcp_tools`` hook; each runs on a worker thread, with
progress and cancellation like ``run_command``.

The server's stdout is the protocol. Commands run with captured pipes; while the server
runs, file descriptor 1 points at stderr (the SDK's stdio transport does that) and
``sys.stdout`` is stderr too, so nothing printed in this process can reach the wire.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import signal
import sys
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import anyio
from mcp import types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

from stockade import __version__, resolved
from stockade.errors import StockadeError, UsageError
from stockade.frontends import McpSession, McpTool
from stockade.run.executor import AbortToken

from . import commands, files, render
from .approval import Approvals
from .plugin import SERVER_TOOLS
from .results import Outcome, failure, internal, text, unknown_arguments
from .running import Context, StdinLines, settle_thread, with_progress
from .tools import declared, tools

if TYPE_CHECKING:
    from stockade.host import Host
    from stockade.request.result import RunResult
    from stockade.workspace.files import Workspace

Handler = Callable[[Context, Mapping[str, Any]], Awaitable[Outcome]]

logger = logging.getLogger("stockade_mcp")

KEEP_RESULTS = 64
"""Results of ``run_command`` a connection keeps for ``read_output`` by ``action_id``."""

INSTRUCTIONS = (
    "Stockade runs commands for you by argv, never through a shell: pass the program and "
    "each argument as separate strings. Commands are confined to the agent's workspace, "
    "bounded in time and output, and recorded. A command that needs a person's approval "
    "is asked about, or held; a held one says how a person runs it. Long-running commands "
    "belong in start_command; read_output reads any command's whole output."
)


class Service(Approvals):
    """The tools of one MCP connection, over one host.

    Args:
        host: the host every command runs through (the caller closes it).
        agent: the agent profile of every request.
        owner: the owner token of this connection's background tasks.
        switches: the offered tools' switches that ``stockade mcp`` got (by flag).

    Raises:
        PluginError: a plugin offers a tool of a name the server or another plugin has.
    """

    def __init__(
        self,
        host: Host,
        *,
        agent: str = "default",
        owner: str | None = None,
        switches: Mapping[str, bool] | None = None,
    ) -> None:
        super().__init__()
        self.host = host
        self.agent = agent
        offered = host.hooks.mcp_tools(SERVER_TOOLS)
        given = dict(switches or {})
        self.switches = {
            s.flag: given.get(s.flag, False) for tool in offered.values() for s in tool.switches
        }
        self.owner = owner if owner is not None else secrets.token_hex(16)
        self._root: str | None = None
        self._workspace: Workspace | None = None
        self._results: OrderedDict[str, RunResult] = OrderedDict()
        self._opening = threading.Lock()
        self._tools = {tool.name: tool for tool in tools(host.config)}
        self._tools.update((name, declared(tool)) for name, tool in offered.items())
        mine: dict[str, Callable[..., Awaitable[Outcome]]] = {
            "run_command": commands.run_command,
            "start_command": commands.start_command,
            "read_output": commands.read_output,
            "kill_command": commands.kill_command,
            "list_commands": commands.list_commands,
            "file_list": files.file_list,
            "file_read": files.file_read,
            "file_write": files.file_write,
        }
        self._handlers: dict[str, Handler] = {
            name: functools.partial(handler, self) for name, handler in mine.items()
        }
        for name, tool in offered.items():
            self._handlers[name] = functools.partial(self.offered, tool)

    def close(self) -> None:
        """Expire the steps this session held unanswered; release the workspace."""
        try:
            self.expire_held()
        except Exception:
            logger.exception("held steps could not be expired")
        if self._workspace is not None:
            self._workspace.close()
            self._workspace = None

    # --- the protocol side -----------------------------------------------------------

    def server(self) -> Server[Any]:
        """A low-level MCP server whose tools are this service's."""

        async def list_tools(
            _ctx: Context, _params: types.PaginatedRequestParams | None
        ) -> types.ListToolsResult:
            return types.ListToolsResult(tools=list(self._tools.values()))

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

        Arguments the tool does not declare are refused; a null one counts as left out.
        ``params`` carries a retried
        call's answers to an approval asked in-band (the 2026-07-28 protocol's
        ``InputRequiredResult``).
        """
        handler = self._handlers.get(name)
        try:
            if handler is None:
                raise UsageError(
                    f"there is no tool {name!r}",
                    hint=f"the tools are {', '.join(self._handlers)}",
                )
            unknown_arguments(name, arguments, self._tools[name].input_schema)
            # A null is an argument left out (strict-schema clients send every key).
            arguments = {key: value for key, value in arguments.items() if value is not None}
            if params is not None and params.request_state is not None:
                return await self.answered(ctx, name, arguments, params)
            return await handler(ctx, arguments)
        except StockadeError as error:
            return failure(error)
        except Exception as error:
            logger.exception("tool %s failed", name)
            return internal(error)

    # --- the workspace and what ran there ------------------------------------------------

    def root(self) -> str:
        """The workspace the server was started for, resolved: the agent's own, else the
        server's current directory. Every command and file path stays inside it."""
        with self._opening:
            if self._root is None:
                from stockade.workspace.folders import workspace_of

                profile = self.host.config.profile(self.agent)
                named = workspace_of(self.host.config, profile)
                self._root = resolved.realpath(named or os.getcwd())
            return self._root

    def workspace(self) -> Workspace:
        """The workspace for the file tools, opened once."""
        root = self.root()
        with self._opening:
            if self._workspace is None:
                from stockade.workspace.files import Workspace

                quota = self.host.config.profile(self.agent).quota_mb
                self._workspace = Workspace(root, quota_mb=quota)
            return self._workspace

    def keep(self, result: RunResult) -> None:
        """Remember a command's result for ``read_output`` by its ``action_id``."""
        with self._opening:
            self._results[result.action_id] = result
            while len(self._results) > KEEP_RESULTS:
                self._results.popitem(last=False)

    def kept(self, action_id: str) -> RunResult | None:
        """A remembered result, by ``action_id``."""
        with self._opening:
            return self._results.get(action_id)

    # --- the tools plugins offer ------------------------------------------------------

    async def offered(
        self, tool: McpTool, ctx: Context, arguments: Mapping[str, Any]
    ) -> types.CallToolResult:
        """Call a plugin's tool on a worker thread; a cancelled call sets its abort token
        and waits for the call to return."""
        token = AbortToken()

        def work() -> types.CallToolResult:
            session = McpSession(self.host, self.agent, self.root(), self.switches)
            out = tool.call(session, arguments, token)
            data = None if out.structured is None else render.jsonable(dict(out.structured))
            return types.CallToolResult(content=[text(out.text)], structured_content=data)

        try:
            return await with_progress(ctx, settle_thread(work, token))
        finally:
            token.close()


# --- the process -----------------------------------------------------------------------


async def serve(
    host: Host, *, agent: str = "default", switches: Mapping[str, bool] | None = None
) -> None:
    """Serve MCP on stdin/stdout until the client leaves (or SIGTERM, SIGHUP, SIGINT)."""
    service = Service(host, agent=agent, switches=switches)
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


def main(
    *,
    config: str | None = None,
    agent: str = "default",
    switches: Mapping[str, bool] | None = None,
) -> int:
    """``stockade mcp``: build the host, serve until the client leaves, close the host.

    ``switches`` are the offered tools' switches given to ``stockade mcp``, by flag.

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
        anyio.run(lambda: serve(host, agent=agent, switches=switches), backend="asyncio")
    except StockadeError as error:
        print(f"stockade: error[{error.code}]: {error.message}", file=sys.stderr)
        return error.exit_status
    finally:
        host.close()
    return 0
