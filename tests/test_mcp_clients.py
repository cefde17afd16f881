"""``stockade mcp`` driven by a third-party client: the OpenAI Agents SDK's ``MCPServerStdio``.

No model is called: the SDK's own MCP connection object starts the server over stdio, lists
its tools, converts them to the function tools a model would be given, and calls them, as
an agent run would. What it gets back is what a model reads.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from agents import Agent
from agents.mcp import MCPServerStdio, MCPUtil
from agents.run_context import RunContextWrapper
from mcp import types

from helpers.mcp_session import CLI, make_setup, script, text_of

SANDBOXES = ("bubblewrap", "landlock")


@contextlib.asynccontextmanager
async def agents_sdk(
    setup: dict[str, Path],
    agent: str = "tester",
    *,
    cwd: Path | None = None,
    structured: bool = False,
) -> AsyncIterator[MCPServerStdio]:
    """``stockade mcp --agent AGENT`` as an Agents SDK MCP server, connected."""
    server = MCPServerStdio(
        params={
            "command": CLI[0],
            "args": [*CLI[1:], "--config", str(setup["config"]), "mcp", "--agent", agent],
            "env": {"XDG_STATE_HOME": os.environ["XDG_STATE_HOME"], "PATH": "/usr/bin:/bin"},
            "cwd": str(cwd or setup["tmp"]),
        },
        name="stockade",
        client_session_timeout_seconds=120,
        use_structured_content=structured,
    )
    async with server:
        yield server


@pytest.mark.asyncio
async def test_the_agents_sdk_lists_converts_and_runs(tmp_path):
    setup = make_setup(tmp_path)
    async with agents_sdk(setup) as server:
        tools = await server.list_tools()
        names = {tool.name for tool in tools}
        function_tools = await MCPUtil.get_function_tools(
            server, True, RunContextWrapper(context=None), Agent(name="probe")
        )
        result = await server.call_tool("run_command", {"argv": ["echo", "from", "agents"]})
    assert {"run_command", "start_command", "read_output", "file_read"} <= names
    assert {tool.name for tool in function_tools} == names
    assert not result.is_error
    assert result.structured_content["stdout"]["text"] == "from agents\n"
    assert "exit status 0" in text_of(result)


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.asyncio
async def test_the_agents_sdk_cannot_move_the_cwd_out(home_tmp, sandbox):
    setup = make_setup(home_tmp, f'sandbox = "{sandbox}"\n')
    ws, outside = setup["ws"], home_tmp / "outside"
    outside.mkdir()
    (ws / "out").symlink_to(outside)
    name = f"canary-{secrets.token_hex(6)}"
    async with agents_sdk(setup, "default", cwd=ws) as server:
        attacks = [
            await server.call_tool("run_command", {"argv": ["touch", name], "cwd": cwd})
            for cwd in ("..", str(outside), "out", "/etc")
        ]
        control = await server.call_tool("run_command", {"argv": ["touch", name]})
    try:
        for result in attacks:
            assert result.is_error and result.structured_content["code"] == "bad_cwd"
            assert str(ws) in text_of(result)
        assert not (home_tmp / name).exists() and not (outside / name).exists()
        assert not Path("/etc", name).exists()
        assert control.structured_content["exit_code"] == 0 and (ws / name).exists()
    finally:
        Path("/etc", name).unlink(missing_ok=True)


@pytest.mark.asyncio
async def test_the_agents_sdk_sees_errors_with_their_hints(tmp_path):
    setup = make_setup(tmp_path)
    async with agents_sdk(setup, "careful") as server:
        held = await server.call_tool("run_command", {"argv": ["touch", "made"]})
        shell = await server.call_tool("run_command", {"argv": ["ls"], "shell": True})
    assert held.is_error and held.structured_content["code"] == "policy_held"
    details = held.structured_content["details"]
    assert f"stockade approve {details['run_id']} {details['step']}" in text_of(held)
    assert shell.is_error and "'shell'" in text_of(shell)
    assert not (setup["ws"] / "made").exists()


@pytest.mark.asyncio
async def test_the_agents_sdk_runs_a_task_and_reads_whole_output(tmp_path):
    setup = make_setup(tmp_path)
    loud = "import sys\nfor i in range(200_000):\n    sys.stdout.write(f'{i:07d}\\n')\n"
    whole = "".join(f"{i:07d}\n" for i in range(200_000))
    async with agents_sdk(setup) as server:
        started = await server.call_tool("start_command", {"argv": script(setup, loud)})
        task = started.structured_content["task_id"]
        reads: list[types.CallToolResult] = []
        with anyio.fail_after(60):
            while not reads or reads[-1].structured_content["status"] == "running":
                reads.append(await server.call_tool("read_output", {"task_id": task}))
                await anyio.sleep(0.2)
        # A strict-schema client sends every key, the unused ones as null.
        window = await server.call_tool(
            "read_output",
            {"task_id": task, "action_id": None, "stream": None, "offset": 800_000, "limit": 80},
        )
        ran = await server.call_tool("run_command", {"argv": script(setup, loud)})
        action = ran.structured_content["action_id"]
        tail = await server.call_tool("read_output", {"action_id": action, "offset": 1_399_920})
    assert reads[-1].structured_content["status"] == "completed"
    assert window.structured_content["text"] == whole[800_000:800_080]
    assert f'"action_id": "{action}"' in text_of(ran) and "/tmp/" not in text_of(ran)
    assert tail.structured_content["text"] == whole[1_399_920:]


@pytest.mark.asyncio
async def test_a_strict_agents_sdk_client_calls_every_tool(tmp_path):
    """Strict mode makes every argument required and non-null-typed unless it may be null:
    each tool converts to a strict schema, and each is called as a strict model would call
    it, every key present, null for the ones it does not mean."""
    import json

    setup = make_setup(tmp_path)
    (setup["ws"] / "notes.txt").write_text("a note\n")
    async with agents_sdk(setup, structured=True) as server:
        tools = await MCPUtil.get_function_tools(
            server, True, RunContextWrapper(context=None), Agent(name="strict")
        )
        by_name = {tool.name: tool for tool in tools}
        assert all(tool.strict_json_schema for tool in tools), [
            t.name for t in tools if not t.strict_json_schema
        ]
        for tool in tools:  # strict: every property required, none left open
            schema = tool.params_json_schema
            assert set(schema["required"]) == set(schema["properties"]), tool.name

        async def call(name: str, **given: object) -> str:
            keys = by_name[name].params_json_schema["properties"]
            arguments = {key: given.get(key) for key in keys}
            context = RunContextWrapper(context=None)
            out = await by_name[name].on_invoke_tool(context, json.dumps(arguments))
            return out if isinstance(out, str) else json.dumps(out, default=str)

        ran = await call("run_command", argv=["echo", "strict"])
        action_id = ran.split('"action_id": "')[1].split('"')[0]
        started = await call("start_command", argv=["sleep", "30"])
        task = started.split("task-")[1].split('"')[0].split()[0].rstrip(".,")
        outputs = {
            "read by action": await call("read_output", action_id=action_id),
            "read by task": await call("read_output", task_id=f"task-{task}"),
            "list": await call("list_commands"),
            "kill": await call("kill_command", task_id=f"task-{task}"),
            "files": await call("file_list"),
            "read": await call("file_read", path="notes.txt"),
            "write": await call("file_write", path="new.txt", content="written\n"),
        }
    assert "strict" in ran and "strict" in outputs["read by action"], outputs
    assert "notes.txt" in outputs["files"] and "a note" in outputs["read"]
    assert (setup["ws"] / "new.txt").read_text() == "written\n"
    for name, out in outputs.items():
        assert "error[usage]" not in out and "unknown argument" not in out, (name, out)
