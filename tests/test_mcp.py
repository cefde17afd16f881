"""``stockade mcp``: the real server over real stdio, driven by the MCP SDK's own client.

Each test starts ``stockade mcp`` as a child process with a config file of its own and a
private ``XDG_STATE_HOME``, and talks to it with ``stdio_client`` + ``ClientSession`` (the
handshake era, as MCP clients speak today) or ``mcp.Client`` (the 2026-07-28 era).
Processes are found by a unique argument in ``/proc/*/cmdline``, which works inside a PID
namespace too (a sandboxed ``$$`` would be the namespace's number, not ours).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, ClientSession, stdio_client, types

from helpers.mcp_session import (
    CLI,
    answering,
    connect,
    make_setup,
    processes_with,
    script,
    server_params,
    text_of,
    unique_sleep,
    until,
)

TOOLS = {
    "run_command",
    "start_command",
    "read_output",
    "kill_command",
    "list_commands",
    "file_list",
    "file_read",
    "file_write",
    "skill",
}


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Path]:
    return make_setup(tmp_path)


# --- tools ----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_lists_the_tools_with_their_annotations(setup):
    async with connect(setup) as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(listed) == TOOLS
    run = listed["run_command"].annotations
    assert run is not None
    assert (run.read_only_hint, run.destructive_hint, run.open_world_hint) == (False, True, True)
    assert listed["run_command"].input_schema["required"] == ["argv"]
    for name in ("read_output", "list_commands", "file_list", "file_read"):
        annotations = listed[name].annotations
        assert annotations is not None and annotations.read_only_hint is True, name
    write = listed["file_write"].annotations
    assert write is not None and write.read_only_hint is False


@pytest.mark.asyncio
async def test_run_command_returns_the_result_as_data_and_text(setup):
    async with connect(setup) as session:
        result = await session.call_tool("run_command", {"argv": ["echo", "hi"]})
    assert not result.is_error
    data = result.structured_content
    assert data["exit_code"] == 0 and data["argv"] == ["echo", "hi"]
    assert data["stdout"]["text"] == "hi\n"
    assert data["classification"]["kind"] and data["sandbox"]["provider"]
    assert "exit status 0" in text_of(result)
    assert "hi" in text_of(result)


@pytest.mark.asyncio
async def test_a_failing_command_is_a_result_not_an_error(setup):
    async with connect(setup) as session:
        result = await session.call_tool(
            "run_command", {"argv": script(setup, "import sys; sys.exit('oops')")}
        )
    assert not result.is_error
    assert result.structured_content["exit_code"] == 1
    assert "exit status 1" in text_of(result) and "oops" in text_of(result)


@pytest.mark.asyncio
async def test_a_denial_is_a_tool_error_that_says_why(setup):
    victim = setup["ws"] / "keep"
    victim.write_text("x")
    async with connect(setup, "echoer") as session:
        result = await session.call_tool("run_command", {"argv": ["rm", "keep"]})
        bad = await session.call_tool("run_command", {"argv": []})
    assert result.is_error
    assert result.structured_content["code"] == "policy_denied"
    assert "denied" in text_of(result) and "rm" in text_of(result)
    assert victim.exists()
    assert bad.is_error and bad.structured_content["code"] == "usage"


# --- approval ---------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_an_ask_accepted_through_elicitation_runs(setup):
    asked: list[str] = []
    async with connect(setup, "careful", elicit=answering("accept", asked)) as session:
        result = await session.call_tool("run_command", {"argv": ["touch", "made"]})
    assert not result.is_error, text_of(result)
    assert result.structured_content["exit_code"] == 0
    assert (setup["ws"] / "made").exists()
    assert "approved by mcp-elicitation:pytest" in text_of(result)
    [question] = asked
    assert "touch made" in question and str(setup["ws"]) in question and "writes" in question


@pytest.mark.parametrize("action", ["decline", "cancel"])
@pytest.mark.asyncio
async def test_an_ask_declined_through_elicitation_does_not_run(setup, action):
    asked: list[str] = []
    async with connect(setup, "careful", elicit=answering(action, asked)) as session:
        result = await session.call_tool("run_command", {"argv": ["touch", "made"]})
    assert result.is_error
    assert result.structured_content["code"] == "policy_denied"
    said = {"decline": "declined by", "cancel": "cancelled by"}[action]
    assert f"{said} mcp-elicitation:pytest" in text_of(result)
    assert "(accept)" not in text_of(result) and "did not run" in text_of(result)
    assert len(asked) == 1
    assert not (setup["ws"] / "made").exists()


@pytest.mark.asyncio
async def test_an_ask_without_elicitation_is_held_for_stockade_approve(setup):
    async with connect(setup, "careful") as session:
        result = await session.call_tool("run_command", {"argv": ["touch", "made"]})
        assert result.is_error
        data = result.structured_content
        assert data["code"] == "policy_held"
        run, step = data["details"]["run_id"], data["details"]["step"]
        assert f"stockade approve {run} {step}" in text_of(result)
        assert not (setup["ws"] / "made").exists()
        # A person approves it later, from the CLI, while the session lasts: it runs then.
        env = {**os.environ, "STOCKADE_CONFIG": str(setup["config"])}
        approved = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [*CLI, "approve", run, str(step)],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
        )
    assert approved.returncode == 0, approved.stderr
    assert (setup["ws"] / "made").exists()


@pytest.mark.asyncio
async def test_a_2026_client_is_asked_in_band(setup):
    """The 2026-07-28 protocol has no server requests: the question rides the result."""
    asked: list[str] = []
    async with Client(
        server_params(setup, "careful"),
        elicitation_callback=answering("accept", asked),
        client_info=types.Implementation(name="modern", version="1"),
    ) as client:
        assert client.session.protocol_version not in (None, "2025-11-25")
        result = await client.call_tool("run_command", {"argv": ["touch", "made"]})
        forged = await client.session.call_tool(
            "run_command", {"argv": ["touch", "other"]}, request_state="forged"
        )
    assert not result.is_error, text_of(result)
    assert "approved by mcp-elicitation:modern" in text_of(result)
    assert len(asked) == 1 and (setup["ws"] / "made").exists()
    assert isinstance(forged, types.CallToolResult) and forged.is_error
    assert not (setup["ws"] / "other").exists()


# --- progress, cancellation, the wire, leaving ------------------------------------------------


@pytest.mark.asyncio
async def test_progress_is_reported_while_a_command_runs(setup):
    seen: list[float] = []

    async def progress(value: float, _total: float | None, _message: str | None) -> None:
        seen.append(value)

    async with connect(setup) as session:
        result = await session.call_tool(
            "run_command", {"argv": ["sleep", "2.5"]}, progress_callback=progress
        )
    assert result.structured_content["exit_code"] == 0
    assert len(seen) >= 2 and seen == sorted(seen)


@pytest.mark.asyncio
async def test_cancelling_the_call_kills_the_command(setup):
    arg = unique_sleep()
    async with connect(setup) as session:
        async with anyio.create_task_group() as group:
            group.start_soon(session.call_tool, "run_command", {"argv": ["sleep", arg]})
            await until(lambda: processes_with(arg))
            group.cancel_scope.cancel()
        await until(lambda: not processes_with(arg))
        after = await session.call_tool("run_command", {"argv": ["echo", "still here"]})
    assert "still here" in text_of(after)


@pytest.mark.asyncio
async def test_cancelling_kills_an_approved_step_too(setup):
    arg, asked = unique_sleep(), []
    async with connect(setup, "careful", elicit=answering("accept", asked)) as session:
        async with anyio.create_task_group() as group:
            group.start_soon(session.call_tool, "run_command", {"argv": ["sleep", arg]})
            await until(lambda: processes_with(arg))
            group.cancel_scope.cancel()
        await until(lambda: not processes_with(arg))
    assert len(asked) == 1


@pytest.mark.asyncio
async def test_the_servers_stdout_carries_only_the_protocol(setup):
    loud = "import sys; sys.stdout.write('x' * 3_000_000); sys.stderr.write('y' * 3_000_000)"
    async with connect(setup) as session:
        result = await session.call_tool("run_command", {"argv": script(setup, loud)})
        after = await session.call_tool("run_command", {"argv": ["echo", "fine"]})
    data = result.structured_content
    assert data["exit_code"] == 0 and data["stdout"]["total_bytes"] == 3_000_000
    assert data["stdout"]["truncated"] and data["stdout"]["spill_path"]
    assert "truncated" in text_of(result) and len(text_of(result)) < 20_000
    assert "fine" in text_of(after)


NOISY = """\
import os, sys
import stockade.host
admit = stockade.host.Host.admit
def noisy(self, request):
    print("noise from print")
    sys.stdout.flush()
    os.write(1, b"noise on fd 1\\n")
    return admit(self, request)
stockade.host.Host.admit = noisy
from stockade.cli import entry
entry()
"""


@pytest.mark.asyncio
async def test_nothing_printed_in_the_server_reaches_the_wire(setup):
    """Code in the server that prints (a plugin, say) writes to stderr, not the protocol."""
    params = server_params(setup, "tester")
    params.args = ["-c", NOISY, *params.args[2:]]
    errors = setup["tmp"] / "noisy.err"
    with errors.open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            first = await session.call_tool("run_command", {"argv": ["echo", "one"]})
            second = await session.call_tool("run_command", {"argv": ["echo", "two"]})
    assert "one" in text_of(first) and "two" in text_of(second)
    noise = errors.read_text()
    assert noise.count("noise from print") == 2 and noise.count("noise on fd 1") == 2


@pytest.mark.parametrize("how", ["end of input", "SIGTERM"])
def test_a_client_that_leaves_leaves_no_process(setup, how):
    foreground, background = unique_sleep(), unique_sleep()
    server = subprocess.Popen(
        [*CLI, "--config", str(setup["config"]), "mcp", "--agent", "tester"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=setup["tmp"],
    )
    assert server.stdin is not None and server.stdout is not None

    def send(message: dict[str, Any]) -> None:
        assert server.stdin is not None
        server.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        server.stdin.flush()

    def call(id_: int, tool: str, argv: list[str]) -> None:
        send(
            {
                "id": id_,
                "method": "tools/call",
                "params": {"name": tool, "arguments": {"argv": argv}},
            }
        )

    try:
        send(
            {
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            }
        )
        assert json.loads(server.stdout.readline())["id"] == 1
        send({"method": "notifications/initialized"})
        call(2, "start_command", ["sleep", background])
        assert "task-" in json.dumps(json.loads(server.stdout.readline()))
        call(3, "run_command", ["sleep", foreground])
        deadline = time.monotonic() + 10
        while not (processes_with(foreground) and processes_with(background)):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        if how == "SIGTERM":
            server.terminate()  # what a client does to a server slow to leave
        else:
            server.stdin.close()  # the client is gone
        assert server.wait(timeout=10) == 0
        deadline = time.monotonic() + 5
        while processes_with(foreground) or processes_with(background):
            assert time.monotonic() < deadline, "a command outlived the server"
            time.sleep(0.05)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        server.stdout.close()
        with contextlib.suppress(OSError):
            server.stdin.close()


# --- background tasks -------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_background_tasks_start_read_kill_list(setup):
    ticker = "import time; print('one', flush=True); time.sleep(1); print('two', flush=True)"
    argv = script(setup, ticker + "; time.sleep(40)")
    async with connect(setup) as session:
        started = await session.call_tool("start_command", {"argv": argv})
        assert not started.is_error, text_of(started)
        task = started.structured_content["task_id"]
        assert started.structured_content["status"] == "running"

        reads: list[str] = []

        async def read() -> str:
            output = await session.call_tool("read_output", {"task_id": task})
            assert not output.is_error, text_of(output)
            reads.append(output.structured_content["stdout"])
            return "".join(reads)

        deadline = time.monotonic() + 10
        while "one" not in await read():
            assert time.monotonic() < deadline
            await anyio.sleep(0.1)
        first = len(reads)
        while "two" not in await read():
            assert time.monotonic() < deadline
            await anyio.sleep(0.1)
        assert "one" not in "".join(reads[first:])  # each read has only what is new

        listed = await session.call_tool("list_commands", {})
        assert [t["task_id"] for t in listed.structured_content["tasks"]] == [task]
        killed = await session.call_tool("kill_command", {"task_id": task})
        assert killed.structured_content["status"] == "killed"
        final = await session.call_tool("read_output", {"task_id": task})
        assert final.structured_content["status"] == "killed"
        unknown = await session.call_tool("read_output", {"task_id": "task-999"})
    assert unknown.is_error and unknown.structured_content["code"] == "unknown_task"


# --- files ------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_file_tools_stay_in_the_workspace(setup):
    async with connect(setup) as session:
        wrote = await session.call_tool(
            "file_write", {"path": "sub/note.txt", "content": "hello\n"}
        )
        listed = await session.call_tool("file_list", {"path": "sub"})
        read = await session.call_tool("file_read", {"path": "sub/note.txt"})
        out = await session.call_tool("file_read", {"path": "../stockade.toml"})
        git = await session.call_tool("file_write", {"path": ".git/config", "content": "x"})
    assert not wrote.is_error and wrote.structured_content["created"]
    assert (setup["ws"] / "sub" / "note.txt").read_text() == "hello\n"
    assert [e["name"] for e in listed.structured_content["entries"]] == ["note.txt"]
    assert read.structured_content["text"] == "hello\n" and "hello" in text_of(read)
    assert out.is_error and out.structured_content["code"] == "usage"
    assert git.is_error and not (setup["ws"] / ".git").exists()


# --- the command line -------------------------------------------------------------------------


def test_an_unknown_agent_fails_before_serving(setup):
    run = subprocess.run(
        [*CLI, "--config", str(setup["config"]), "mcp", "--agent", "nobody"],
        input="",
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 125
    assert run.stdout == ""
    assert "unknown agent profile 'nobody'" in run.stderr


def test_without_stockade_mcp_the_command_says_what_to_install():
    run = subprocess.run(
        [*CLI, "mcp"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "STOCKADE_DISABLE_PLUGINS": "mcp"},
    )
    assert run.returncode == 125
    assert "error[plugin]" in run.stderr and "stockade-mcp" in run.stderr


def test_the_cli_does_not_import_mcp_until_asked():
    probe = "import sys, stockade.cli; stockade.cli.build_parser(); print('mcp' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"


@pytest.mark.asyncio
async def test_the_skill_tool_reads_and_runs_behind_the_gate(setup):
    async with connect(setup) as session:
        read = await session.call_tool(
            "skill",
            {"skill_name": "unit-convert", "resource": "references/units.md", "max_chars": 40},
        )
        ran = await session.call_tool(
            "skill",
            {
                "skill_name": "unit-convert",
                "resource": "scripts/convert.py",
                "execute": True,
                "args": ["5", "km", "mi"],
            },
        )
        refused = await session.call_tool(
            "skill",
            {"skill_name": "unit-convert", "resource": "assets/units.json", "execute": True},
        )
    assert not read.is_error and read.structured_content["next_offset"] == 40
    assert text_of(read).startswith("# Units")
    assert not ran.is_error, text_of(ran)
    assert text_of(ran).startswith("[SKILL_SCRIPT_EXECUTED]")
    assert "5 km = 3.10686 mi" in text_of(ran)
    assert ran.structured_content["result"]["exit_code"] == 0
    assert refused.is_error and refused.structured_content["code"] == "bad_resource"
    assert not [n for n in os.listdir(setup["ws"]) if n.startswith(".stockade-skill-")]


@pytest.mark.asyncio
async def test_a_shut_skill_gate_is_a_tool_error_naming_its_states(setup):
    async with connect(setup, "echoer") as session:
        shut = await session.call_tool(
            "skill",
            {"skill_name": "csv-summary", "resource": "scripts/summarize.py", "execute": True},
        )
    assert shut.is_error and shut.structured_content["code"] == "execution_error"
    assert "agent 'echoer' may not run python3" in text_of(shut)
    assert "add python3 to agents.echoer.programs" in text_of(shut)
