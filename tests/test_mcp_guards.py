"""``stockade mcp`` against what a model (or a client) may throw at it, through real sessions.

Containment is attacked on both backends: each attack has a canary that would appear on the
host if it got through, beside a control write that must land, so a pass means the server
refused, not that the attack never reached anything. Every kind of ``run_command`` result is
checked against the output schema the tool declares, as a client such as the Inspector does.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import types

from helpers.mcp_session import CLI, answering, connect, make_setup, script, text_of
from stockade.config.load import load_config
from stockade.record import chain as record
from stockade.record.store import open_store

SANDBOXES = ("bubblewrap", "landlock")


def setup_for(tmp_path: Path, extra: str = "") -> dict[str, Path]:
    return make_setup(tmp_path, extra)


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Path]:
    return make_setup(tmp_path)


# --- containment --------------------------------------------------------------------------


@pytest.mark.parametrize("agent", ["default", "tester"])
@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.asyncio
async def test_cwd_cannot_leave_the_workspace(home_tmp, sandbox, agent):
    tmp_path = home_tmp
    """cwd /etc, .., an absolute path outside, a symlink out, a sibling sharing the prefix:
    each refused with bad_cwd naming the workspace, and its canary absent from the host."""
    setup = setup_for(tmp_path, f'sandbox = "{sandbox}"\n')
    ws, outside, sibling = setup["ws"], tmp_path / "outside", tmp_path / "ws-evil"
    for folder in (outside, sibling, ws / "sub"):
        folder.mkdir()
    (ws / "link").symlink_to(outside)
    name = f"canary-{secrets.token_hex(6)}"
    (ws / "made-by-test").write_text("control")
    attacks = {
        "/etc": Path("/etc") / name,
        "..": tmp_path / name,
        "../outside": outside / name,
        str(outside): outside / name,
        "link": outside / name,
        "link/.": outside / name,
        "sub/../../outside": outside / name,
        "../ws-evil": sibling / name,
        str(sibling): sibling / name,
    }
    try:
        # The default agent works in the directory the server was started in: the workspace.
        async with connect(setup, agent, cwd=ws) as session:
            refused = {
                cwd: await session.call_tool("run_command", {"argv": ["touch", name], "cwd": cwd})
                for cwd in attacks
            }
            started = await session.call_tool(
                "start_command", {"argv": ["touch", name], "cwd": "link"}
            )
            wrote = await session.call_tool("file_write", {"path": f"link/{name}", "content": "x"})
            (outside / "secret.txt").write_text(name)
            peeks = [
                await session.call_tool(tool, {"path": path})
                for tool, path in (
                    ("file_read", "link/secret.txt"),
                    ("file_read", str(outside / "secret.txt")),
                    ("file_read", "../outside/secret.txt"),
                    ("file_list", "link"),
                    ("file_list", ".."),
                )
            ]
            inside = await session.call_tool("file_read", {"path": "sub/../made-by-test"})
            here = await session.call_tool("run_command", {"argv": ["touch", "made-here"]})
            sub = await session.call_tool(
                "run_command", {"argv": ["touch", "made-in-sub"], "cwd": "sub"}
            )
            deep = await session.call_tool(
                "run_command", {"argv": ["touch", "made-deep"], "cwd": str(ws / "sub")}
            )
        for canary in set(attacks.values()):
            assert not canary.exists(), canary
        for cwd, result in refused.items():
            assert result.is_error, (cwd, text_of(result))
            data = result.structured_content
            assert data["code"] == "bad_cwd", (cwd, data)
            assert data["details"]["workspace"] == str(ws.resolve())
            assert str(ws.resolve()) in text_of(result)
        assert started.is_error and started.structured_content["code"] == "bad_cwd"
        assert wrote.is_error
        for peek in peeks:
            assert peek.is_error and name not in text_of(peek), text_of(peek)
            assert name not in json.dumps(peek.structured_content)
            assert "entries" not in peek.structured_content  # no listing of outside
        assert not inside.is_error and text_of(inside) == "control"
        # The controls: the same write lands inside the workspace, at its top and below.
        assert not here.is_error and here.structured_content["exit_code"] == 0, text_of(here)
        assert (ws / "made-here").exists()
        assert sub.structured_content["exit_code"] == 0 and (ws / "sub" / "made-in-sub").exists()
        assert deep.structured_content["exit_code"] == 0 and (ws / "sub" / "made-deep").exists()
        assert here.structured_content["sandbox"]["provider"] == sandbox
    finally:
        Path("/etc", name).unlink(missing_ok=True)


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.asyncio
async def test_the_writable_root_is_the_workspace_not_the_cwd(home_tmp, sandbox):
    tmp_path = home_tmp
    """From a cwd inside, a write to the workspace's parent is refused by the sandbox; the
    same write to the workspace lands."""
    setup = setup_for(tmp_path, f'sandbox = "{sandbox}"\n')
    ws = setup["ws"]
    (ws / "sub").mkdir()
    async with connect(setup, "default", cwd=ws) as session:
        out = await session.call_tool(
            "run_command", {"argv": ["touch", "../../escaped"], "cwd": "sub"}
        )
        control = await session.call_tool(
            "run_command", {"argv": ["touch", "../landed"], "cwd": "sub"}
        )
    assert out.structured_content["exit_code"] != 0
    assert not (tmp_path / "escaped").exists()
    assert control.structured_content["exit_code"] == 0 and (ws / "landed").exists()


# --- every result matches the declared schema ------------------------------------------------


@pytest.mark.asyncio
async def test_every_run_command_result_matches_its_output_schema(setup):
    ws = setup["ws"]
    (ws / "keep").write_text("x")
    results: dict[str, types.CallToolResult] = {}
    async with connect(setup, "careful") as session:
        listed = {t.name: t for t in (await session.list_tools()).tools}
        results["success"] = await session.call_tool("run_command", {"argv": ["echo", "hi"]})
        results["held"] = await session.call_tool("run_command", {"argv": ["touch", "made"]})
        results["not found"] = await session.call_tool(
            "run_command", {"argv": ["no-such-program-here"]}
        )
        results["usage"] = await session.call_tool("run_command", {"argv": []})
        results["bad cwd"] = await session.call_tool(
            "run_command", {"argv": ["true"], "cwd": "/etc"}
        )
        results["unknown argument"] = await session.call_tool(
            "run_command", {"argv": ["true"], "shell": True}
        )
        results["too big"] = await session.call_tool(
            "run_command", {"argv": ["echo", "x" * 200_000]}
        )
    async with connect(setup, "echoer") as session:
        results["denied"] = await session.call_tool("run_command", {"argv": ["rm", "keep"]})
    async with connect(setup, "careful", elicit=answering("decline", [])) as session:
        results["declined"] = await session.call_tool("run_command", {"argv": ["touch", "made"]})
    schema = listed["run_command"].output_schema
    assert schema is not None
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for kind, result in results.items():
        errors = [e.message for e in validator.iter_errors(result.structured_content)]
        assert not errors, (kind, errors)
        assert result.is_error == (kind != "success"), kind
    codes = {kind: r.structured_content.get("code") for kind, r in results.items()}
    assert codes == {
        "success": None,
        "held": "policy_held",
        "not found": "program_not_found",
        "usage": "usage",
        "bad cwd": "bad_cwd",
        "unknown argument": "usage",
        "too big": "usage",
        "denied": "policy_denied",
        "declined": "policy_denied",
    }
    held = results["held"].structured_content["details"]
    assert f"stockade approve {held['run_id']} {held['step']}" in text_of(results["held"])
    assert (ws / "keep").read_text() == "x"


@pytest.mark.asyncio
async def test_the_tool_schemas_use_no_type_lists_and_say_the_limits(tmp_path):
    setup = setup_for(tmp_path, "[timeout]\ndefault = 45\nmax = 300\n\n")
    async with connect(setup) as session:
        listed = {t.name: t for t in (await session.list_tools()).tools}

    def type_lists(node: Any) -> list[Any]:
        if isinstance(node, dict):
            found = [node["type"]] if isinstance(node.get("type"), list) else []
            return found + [x for value in node.values() for x in type_lists(value)]
        if isinstance(node, list):
            return [x for value in node for x in type_lists(value)]
        return []

    for tool in listed.values():
        assert not type_lists(tool.input_schema), tool.name
        assert not type_lists(tool.output_schema), tool.name
    run = listed["run_command"].description or ""
    assert "45 s" in run and "300 s" in run and "30 s" not in run
    assert "sh -c" in run and "python -c" in run and "start_command" in run
    assert "300 s" in (listed["start_command"].description or "")


@pytest.mark.asyncio
async def test_unknown_arguments_and_huge_arguments_are_refused_clearly(setup):
    async with connect(setup) as session:
        shell = await session.call_tool("run_command", {"argv": ["touch", "made"], "shell": True})
        files = await session.call_tool("file_list", {"path": ".", "recursive": True})
        huge = await session.call_tool("run_command", {"argv": ["echo", "x" * 5_000_000]})
        many = await session.call_tool("run_command", {"argv": ["echo", *["y" * 100_000] * 12]})
    assert shell.is_error and "'shell'" in text_of(shell) and "argv" in text_of(shell)
    assert not (setup["ws"] / "made").exists()
    assert files.is_error and "'recursive'" in text_of(files)
    for result in (huge, many):
        assert result.is_error and result.structured_content["code"] == "usage"
        assert "too big" in text_of(result) and "file_write" in text_of(result)
        assert "E2BIG" not in text_of(result) and "Argument list" not in text_of(result)


@pytest.mark.asyncio
async def test_an_unchecked_form_reads_declined_not_accept(setup):
    async def unchecked(_context: Any, _params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"approve": False})

    async with connect(setup, "careful", elicit=unchecked) as session:
        result = await session.call_tool("run_command", {"argv": ["touch", "made"]})
    assert result.is_error and result.structured_content["code"] == "policy_denied"
    assert "declined by mcp-elicitation:pytest" in text_of(result)
    assert "(accept)" not in text_of(result)
    assert not (setup["ws"] / "made").exists()


# --- approved start_command, expiry ----------------------------------------------------------


@pytest.mark.asyncio
async def test_an_approved_start_command_starts_a_background_task(setup):
    asked: list[str] = []
    argv = ["sh", "-c", "echo started; sleep 40 && rm -f none"]  # it destroys: it asks
    async with connect(setup, "tester", elicit=answering("accept", asked)) as session:
        started = await session.call_tool("start_command", {"argv": argv})
        assert not started.is_error, text_of(started)
        task = started.structured_content["task_id"]
        assert started.structured_content["status"] == "running"
        assert "approved by mcp-elicitation:pytest" in text_of(started)
        seen = ""
        with anyio.fail_after(30):
            while "started" not in seen:
                read = await session.call_tool("read_output", {"task_id": task})
                seen += read.structured_content["stdout"]
                await anyio.sleep(0.1)
        killed = await session.call_tool("kill_command", {"task_id": task})
    assert len(asked) == 1 and "sh -c" in asked[0]
    assert killed.structured_content["status"] == "killed"


def events_of(setup: dict[str, Path], run_id: str) -> list[dict[str, Any]]:
    store = open_store(load_config(str(setup["config"]), environ=os.environ))
    try:
        return [row.body for row in record.rows(store, run_id)]
    finally:
        store.close()


@pytest.mark.asyncio
async def test_held_steps_expire_recorded_when_the_session_ends(setup):
    async with connect(setup, "careful") as session:
        held = await session.call_tool("run_command", {"argv": ["touch", "made"]})
        answered = await session.call_tool("run_command", {"argv": ["touch", "other"]})
        run, step = (
            held.structured_content["details"]["run_id"],
            held.structured_content["details"]["step"],
        )
        other = answered.structured_content["details"]["step"]
        env = {**os.environ, "STOCKADE_CONFIG": str(setup["config"])}
        # A person answers one of the two while the session lasts: theirs stands.
        approved = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [*CLI, "approve", run, str(other)], env=env, capture_output=True, check=False
            )
        )
        assert approved.returncode == 0
    late = subprocess.run(
        [*CLI, "approve", run, str(step)], env=env, capture_output=True, text=True, check=False
    )
    pending = subprocess.run(
        [*CLI, "pending"], env=env, capture_output=True, text=True, check=False
    )
    assert late.returncode != 0 and "declined" in late.stderr
    assert run not in pending.stdout
    assert not (setup["ws"] / "made").exists() and (setup["ws"] / "other").exists()
    declines = [e for e in events_of(setup, run) if e["kind"] == "decline"]
    assert [e["reason"] for e in declines] == ["expired"]
    assert "session" in declines[0]["by"]
    verified = subprocess.run(
        [*CLI, "verify"], env=env, capture_output=True, text=True, check=False
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


# --- whole output through a tool, capped structured results ----------------------------------

NUMBERED = "import sys\nfor i in range(300_000):\n    sys.stdout.write(f'{i:09d}\\n')\n"
WHOLE = "".join(f"{i:09d}\n" for i in range(300_000))


@pytest.mark.asyncio
async def test_read_output_reads_a_whole_stream_by_step_and_by_task(setup):
    async with connect(setup) as session:
        ran = await session.call_tool("run_command", {"argv": script(setup, NUMBERED)})
        action = ran.structured_content["action_id"]
        head = await session.call_tool("read_output", {"action_id": action, "limit": 100})
        middle = await session.call_tool(
            "read_output", {"action_id": action, "offset": 1_500_003, "limit": 1000}
        )
        end = await session.call_tool(
            "read_output", {"action_id": action, "offset": len(WHOLE) - 20}
        )
        started = await session.call_tool("start_command", {"argv": script(setup, NUMBERED)})
        task = started.structured_content["task_id"]
        running = await session.call_tool("read_output", {"task_id": task, "offset": 0})
        with anyio.fail_after(60):
            while True:
                read = await session.call_tool("read_output", {"task_id": task})
                if read.structured_content["status"] != "running":
                    break
                await anyio.sleep(0.2)
        by_task = await session.call_tool(
            "read_output", {"task_id": task, "offset": 2_000_000, "limit": 50}
        )
        nobody = await session.call_tool("read_output", {"action_id": "nope"})
    assert ran.structured_content["stdout"]["truncated"]
    shown = text_of(ran)
    assert "read_output" in shown and action in shown and "stockade-spill" not in shown
    assert head.structured_content["text"] == WHOLE[:100]
    assert head.structured_content["next_offset"] == 100
    assert middle.structured_content["text"] == WHOLE[1_500_003:1_501_003]
    assert end.structured_content["text"] == WHOLE[-20:]
    assert end.structured_content["next_offset"] is None and "end of stdout" in text_of(end)
    # (A task still running may have ended already on a fast machine: either is right.)
    assert running.is_error or running.structured_content["text"] == WHOLE[:262_144]
    assert by_task.structured_content["text"] == WHOLE[2_000_000:2_000_050]
    assert "stockade-spill" not in text_of(read)
    assert nobody.is_error and nobody.structured_content["code"] == "usage"


@pytest.mark.asyncio
async def test_the_structured_result_is_capped_like_the_text(setup):
    async with connect(setup) as session:
        result = await session.call_tool("run_command", {"argv": ["seq", "1", "2000000"]})
    data = result.structured_content
    assert len(json.dumps(data)) < 30_000 and len(text_of(result)) < 20_000
    assert data["stdout"]["truncated"] and data["stdout"]["cut_chars"] > 0
    assert data["stdout"]["text"].endswith("1999999\n2000000\n")  # the tail is kept
    assert data["stdout"]["text"].startswith("1\n2\n3\n")
    assert data["stdout"]["total_bytes"] == len("".join(f"{i}\n" for i in range(1, 2000001)))


@pytest.mark.asyncio
async def test_file_read_checks_the_file_it_opened_not_the_path(home_tmp, monkeypatch):
    # Another process flips `notes` between an open file and a private one: the path is
    # checked, then opened. The read is checked again as the file its descriptor opened.
    from stockade.config.load import parse_config
    from stockade.conformance.suite.racing import flipping
    from stockade.host import Host
    from stockade.workspace.files import Workspace
    from stockade_mcp.server import Service

    monkeypatch.setenv("XDG_STATE_HOME", str(home_tmp / "state"))
    ws = home_tmp / "ws"
    (ws / "private").mkdir(parents=True)
    (ws / "private" / "key").write_text("canary-private\n")
    (ws / "open.txt").write_text("open\n")
    (ws / "notes").symlink_to("open.txt")
    toml = f'sandbox = "landlock"\n[agents.keeper]\nworkspace = "{ws}"\nprivate = ["private/*"]\n'
    plain = Workspace.file_read

    def unchecked(self, path, *, offset=0, limit=256 * 1024, check=None):
        return plain(self, path, offset=offset, limit=limit)

    checked, control = "", ""
    with Host(parse_config(toml)) as host, flipping(ws / "notes", ["private/key", "open.txt"]):
        service = Service(host, agent="keeper")
        # Pairs until the control has read the canary (the race was won), 40 at least.
        for count in range(400):
            checked += text_of(await service.call(None, "file_read", {"path": "notes"}))
            with monkeypatch.context() as patch:
                patch.setattr(Workspace, "file_read", unchecked)
                control += text_of(await service.call(None, "file_read", {"path": "notes"}))
            if count >= 40 and "canary-private" in control:
                break
    assert "canary-private" in control  # the race was won: the test can see a breach
    assert "canary-private" not in checked and "open" in checked
