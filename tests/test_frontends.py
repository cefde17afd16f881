"""Front ends through hooks: a test distribution adds ``stockade hello`` and the MCP tool
``hello`` through ``stockade_cli_commands`` and ``stockade_mcp_tools``, and both work.

The distribution is written to ``tmp_path`` (a package and a ``*.dist-info`` with its
``entry_points.txt``) and put on ``PYTHONPATH`` of the real CLI and the real
``stockade mcp``, spoken to by the MCP SDK's own client.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from helpers.mcp_session import CLI, make_setup, text_of, until
from stockade import hookimpl
from stockade.cli import HANDLERS
from stockade.config.schema import Config
from stockade.errors import PluginError
from stockade.frontends import CliCommand, McpTool, ToolOutput, ToolSwitch
from stockade.plugin.manager import Hooks, get_plugin_manager
from stockade_mcp.plugin import SERVER_TOOLS

HELLO = '''
"""A third party's front ends: ``stockade hello`` and the MCP tool ``hello``."""

from __future__ import annotations

import os
import select

from stockade import hookimpl
from stockade.frontends import CliCommand, McpTool, ToolOutput, ToolSwitch

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "wait_in": {"type": "string", "description": "a folder: wait there to be cancelled"},
    },
}
OUTPUT = {
    "type": "object",
    "properties": {
        "greeting": {"type": "string"},
        "agent": {"type": "string"},
        "root": {"type": "string"},
    },
}


def _arguments(parser, cli):
    parser.add_argument("--loud", action="store_true")


def _handle(args, cli):
    print("HELLO FROM A PLUGIN" if args.loud else "hello from a plugin")
    return 0


def _call(session, arguments, abort):
    folder = arguments.get("wait_in")
    if folder is not None:
        with open(os.path.join(folder, "started"), "w") as f:
            f.write("started")
        ready, _, _ = select.select([abort], [], [], 60)
        with open(os.path.join(folder, "ended"), "w") as f:
            f.write("aborted" if ready and abort.aborted else "not aborted")
    greeting = "hello " + arguments.get("name", "world")
    if session.switches["--hello-loud"]:
        greeting = greeting.upper()
    return ToolOutput(
        greeting, {"greeting": greeting, "agent": session.agent, "root": session.root}
    )


@hookimpl
def stockade_cli_commands(add):
    add(CliCommand("hello", "say hello", _arguments, _handle))


@hookimpl
def stockade_mcp_tools(add):
    add(
        McpTool(
            "hello",
            "Say hello",
            "Greets NAME.",
            SCHEMA,
            _call,
            output_schema=OUTPUT,
            read_only=True,
            destructive=False,
            idempotent=True,
            open_world=False,
            switches=(ToolSwitch("--hello-loud", "greet loudly"),),
        )
    )
'''

CLASH = """
from stockade import hookimpl
from stockade.frontends import CliCommand


@hookimpl
def stockade_cli_commands(add):
    add(CliCommand("run", "not the real run", lambda parser, cli: None, lambda args, cli: 0))
"""

TOOL_CLASH = """
from stockade import hookimpl
from stockade.frontends import McpTool, ToolOutput


@hookimpl
def stockade_mcp_tools(add):
    add(
        McpTool(
            "run_command",
            "Not the real one",
            "Takes the server's own name.",
            {"type": "object"},
            lambda session, arguments, abort: ToolOutput("no"),
        )
    )
"""


def _distribution(site: Path, name: str, source: str) -> None:
    package = site / f"stockade_{name}"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "plugin.py").write_text(textwrap.dedent(source))
    info = site / f"stockade_{name}-1.0.dist-info"
    info.mkdir()
    (info / "entry_points.txt").write_text(f"[stockade]\n{name} = stockade_{name}.plugin\n")


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Path]:
    found = make_setup(tmp_path)
    _distribution(tmp_path / "site", "hello", HELLO)
    _distribution(tmp_path / "clashing", "clash", CLASH)
    _distribution(tmp_path / "clashing-tool", "toolclash", TOOL_CLASH)
    return found


def _env(setup: dict[str, Path], *sites: str) -> dict[str, str]:
    path = os.pathsep.join(str(setup["tmp"] / site) for site in sites)
    return {**os.environ, "PYTHONPATH": path}


def _cli(setup: dict[str, Path], *args: str, sites: tuple[str, ...] = ("site",)):
    return subprocess.run(
        [*CLI, "--config", str(setup["config"]), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env=_env(setup, *sites),
        cwd=setup["tmp"],
    )


# --- the command line -----------------------------------------------------------------------


def test_a_plugin_command_runs_with_its_options(setup):
    loud = _cli(setup, "hello", "--loud")
    quiet = _cli(setup, "hello")
    helped = _cli(setup, "--help")
    bad = _cli(setup, "hello", "--whisper")
    assert (loud.returncode, loud.stdout) == (0, "HELLO FROM A PLUGIN\n"), loud.stderr
    assert (quiet.returncode, quiet.stdout) == (0, "hello from a plugin\n"), quiet.stderr
    assert "say hello" in helped.stdout and "hello" in helped.stdout
    assert bad.returncode == 125 and "unrecognized arguments: --whisper" in bad.stderr


def test_stockade_plugins_lists_what_each_plugin_offers(setup):
    listing = json.loads(_cli(setup, "plugins", "--json").stdout)
    hello = next(p for p in listing["plugins"] if p["name"] == "hello")
    assert (hello["dist"], hello["version"]) == ("stockade_hello", "1.0")
    assert hello["commands"] == ["hello"] and hello["tools"] == ["hello"]
    assert hello["hooks"] == ["stockade_cli_commands", "stockade_mcp_tools"]
    local = next(p for p in listing["plugins"] if p["name"] == "local")
    assert local["executors"] == ["local"] and local["commands"] == []
    text = _cli(setup, "plugins").stdout
    assert "offers: command hello; MCP tool hello" in text


def test_a_built_in_command_parses_without_loading_any_plugin(setup):
    probe = (
        "import sys\n"
        "from stockade.cli import main\n"
        "try:\n"
        "    main(['run', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = ('stockade_hello', 'stockade.plugin.manager', 'stockade.frontends',"
        " 'stockade_mcp')\n"
        "print(sorted(m for m in sys.modules if m.startswith(loaded)), file=sys.stderr)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=_env(setup, "site"),
    )
    assert "PROGRAM" in run.stdout and "hello" not in run.stdout
    assert run.stderr.strip() == "[]"


def test_a_plugin_taking_a_built_in_name_is_a_clear_error(setup):
    clash = _cli(setup, "hello", sites=("site", "clashing"))
    assert clash.returncode == 125
    assert (
        "error[plugin]: plugin 'clash' offers the command 'run', which the built-in command "
        "already has" in clash.stderr
    )
    mcp = _cli(setup, "mcp", sites=("site", "clashing-tool"))
    assert mcp.returncode == 125
    assert (
        "plugin 'toolclash' offers the MCP tool 'run_command', which the MCP server's own tool "
        "already has" in mcp.stderr
    )
    # The built-in commands never ask for the offers: `stockade run` still works.
    ran = _cli(setup, "run", "--", "true", sites=("site", "clashing"))
    assert ran.returncode == 0, ran.stderr


class _Offers:
    def __init__(self, command: str, tool: str) -> None:
        self.command, self.tool = command, tool

    @hookimpl
    def stockade_cli_commands(self, add):
        add(CliCommand(self.command, "x", lambda parser, cli: None, lambda args, cli: 0))

    @hookimpl
    def stockade_mcp_tools(self, add):
        schema = {"type": "object"}
        add(McpTool(self.tool, "X", "x", schema, lambda s, a, t: ToolOutput("x")))


def _hooks(*plugins: object) -> Hooks:
    return Hooks(get_plugin_manager(Config(), environ={}, plugins=plugins, load_entry_points=False))


def test_two_plugins_offering_one_name_are_an_error_naming_both():
    hooks = _hooks(_Offers("greet", "greet"), _Offers("greet", "other"))
    with pytest.raises(PluginError, match=r"offers the command 'greet', which plugin '\d+'"):
        hooks.cli_commands(HANDLERS)
    tools = _hooks(_Offers("a", "greet"), _Offers("b", "greet"))
    with pytest.raises(PluginError, match=r"offers the MCP tool 'greet', which plugin '\d+'"):
        tools.mcp_tools(SERVER_TOOLS)
    clash = _hooks(_Offers("plugins", "file_read"))
    with pytest.raises(PluginError, match="'plugins', which the built-in command already has"):
        clash.cli_commands(HANDLERS)
    with pytest.raises(PluginError, match="'file_read', which the MCP server's own tool"):
        clash.mcp_tools(SERVER_TOOLS)
    assert list(_hooks(_Offers("a", "b")).cli_commands(HANDLERS)) == ["a"]


def test_offers_are_checked_when_made():
    with pytest.raises(PluginError, match="command 'Hello World' is not a valid name"):
        CliCommand("Hello World", "x", lambda parser, cli: None, lambda args, cli: 0)
    with pytest.raises(PluginError, match="switch '-x' is not a valid name"):
        ToolSwitch("-x", "x")
    with pytest.raises(PluginError, match="input_schema must be a JSON schema of type 'object'"):
        McpTool("t", "T", "t", {"type": "array"}, lambda s, a, t: ToolOutput("x"))


# --- the MCP tool ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _connect(setup: dict[str, Path], *switches: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=CLI[0],
        args=[*CLI[1:], "--config", str(setup["config"]), "mcp", "--agent", "tester", *switches],
        env={
            "XDG_STATE_HOME": os.environ["XDG_STATE_HOME"],
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(setup["tmp"] / "site"),
        },
        cwd=str(setup["tmp"]),
    )
    with (setup["tmp"] / "server.err").open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


@pytest.mark.asyncio
async def test_the_offered_tool_is_listed_and_called(setup):
    async with _connect(setup) as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
        result = await session.call_tool("hello", {"name": "you", "wait_in": None})
        unknown = await session.call_tool("hello", {"shell": True})
    hello = listed["hello"]
    assert set(listed) >= {*SERVER_TOOLS, "hello"}
    assert hello.description == "Greets NAME."
    assert hello.input_schema["properties"]["name"] == {"type": "string"}
    assert hello.output_schema is not None and "greeting" in hello.output_schema["properties"]
    annotations = hello.annotations
    assert annotations is not None and annotations.title == "Say hello"
    assert (annotations.read_only_hint, annotations.destructive_hint) == (True, False)
    assert (annotations.idempotent_hint, annotations.open_world_hint) == (True, False)
    assert not result.is_error
    assert text_of(result) == "hello you"
    assert result.structured_content == {
        "greeting": "hello you",
        "agent": "tester",
        "root": os.path.realpath(setup["ws"]),
    }
    assert unknown.is_error and unknown.structured_content["code"] == "usage"
    assert "hello takes no argument 'shell'" in text_of(unknown)


@pytest.mark.asyncio
async def test_the_tools_switch_reaches_its_session(setup):
    async with _connect(setup, "--hello-loud") as session:
        result = await session.call_tool("hello", {"name": "you"})
    assert text_of(result) == "HELLO YOU"


@pytest.mark.asyncio
async def test_cancelling_the_call_sets_the_abort_token(setup):
    folder = setup["tmp"] / "wait"
    folder.mkdir()
    async with _connect(setup) as session:
        async with anyio.create_task_group() as group:
            group.start_soon(session.call_tool, "hello", {"wait_in": str(folder)})
            await until((folder / "started").exists)
            group.cancel_scope.cancel()
        await until((folder / "ended").exists)
        after = await session.call_tool("hello", {})
    assert (folder / "ended").read_text() == "aborted"
    assert text_of(after) == "hello world"
