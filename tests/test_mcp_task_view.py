"""``stockade mcp``'s file tools on a running task's view: ``task_id`` reads the task's layer
over the folder (:mod:`stockade.layers.view`), over the real server and the SDK's client."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from helpers.mcp_session import connect, make_setup, script, text_of


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Path]:
    return make_setup(tmp_path)


@pytest.mark.asyncio
async def test_the_file_tools_read_a_running_tasks_view_by_task_id(setup):
    code = "import time\nopen('seen.txt', 'w').write('mine')\nprint('ready', flush=True)\n"
    async with connect(setup) as session:
        started = await session.call_tool(
            "start_command", {"argv": script(setup, code + "time.sleep(30)")}
        )
        task = started.structured_content["task_id"]
        deadline = time.monotonic() + 20
        while "ready" not in text_of(await session.call_tool("read_output", {"task_id": task})):
            assert time.monotonic() < deadline
            await anyio.sleep(0.1)
        viewed = await session.call_tool("file_read", {"path": "seen.txt", "task_id": task})
        listed = await session.call_tool("file_list", {"task_id": task})
        plain = await session.call_tool("file_read", {"path": "seen.txt"})
        other = await session.call_tool("file_read", {"path": "seen.txt", "task_id": "task-9"})
        await session.call_tool("kill_command", {"task_id": task})
    writes = started.structured_content
    assert not viewed.is_error, text_of(viewed)
    assert viewed.structured_content["text"] == "mine"  # the task's view: its layer
    assert "seen.txt" in [e["name"] for e in listed.structured_content["entries"]]
    assert plain.is_error  # the folder itself: not there until the task ends and lands
    assert other.is_error and "no running task" in text_of(other)
    assert writes["status"] == "running"
