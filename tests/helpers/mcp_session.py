"""Shared by the MCP tests: a config, the real ``stockade mcp`` over stdio, and its client.

Processes are found by a unique argument in ``/proc/*/cmdline``, which works inside a PID
namespace too (a sandboxed ``$$`` would be the namespace's number, not ours).
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client, types

from stockade.testing import FRONT_END_PROFILES

CLI = [sys.executable, "-c", "from stockade.cli import entry; entry()"]
EXAMPLES = Path(__file__).resolve().parents[2] / "skills"
CONFIG = (
    f"""\
[skills]
project = ["{EXAMPLES}"]
user = []
safe_mode = false

"""
    + FRONT_END_PROFILES
)

Elicit = Callable[[Any, types.ElicitRequestParams], Any]


def make_setup(tmp_path: Path, extra: str = "") -> dict[str, Path]:
    """A workspace ``ws`` and a config file (with ``extra`` TOML at its top) under ``tmp_path``."""
    ws = tmp_path / "ws"
    ws.mkdir()
    config = tmp_path / "stockade.toml"
    config.write_text(extra + CONFIG.format(ws=ws), encoding="utf-8")
    return {"ws": ws, "config": config, "tmp": tmp_path}


def server_params(
    setup: dict[str, Path], agent: str, *, cwd: Path | None = None
) -> StdioServerParameters:
    """``stockade mcp --agent AGENT`` started in ``cwd`` (the setup's folder by default)."""
    return StdioServerParameters(
        command=CLI[0],
        args=[*CLI[1:], "--config", str(setup["config"]), "mcp", "--agent", agent],
        # The system's python3 for skill scripts: a venv under /tmp is not in the sandbox.
        env={"XDG_STATE_HOME": os.environ["XDG_STATE_HOME"], "PATH": "/usr/bin:/bin"},
        cwd=str(cwd or setup["tmp"]),
    )


@contextlib.asynccontextmanager
async def connect(
    setup: dict[str, Path],
    agent: str = "tester",
    *,
    elicit: Elicit | None = None,
    cwd: Path | None = None,
) -> AsyncIterator[ClientSession]:
    """A handshake-era session with ``stockade mcp --agent AGENT``."""
    with (setup["tmp"] / "server.err").open("a") as errlog:
        async with (
            stdio_client(server_params(setup, agent, cwd=cwd), errlog=errlog) as (read, write),
            ClientSession(
                read,
                write,
                elicitation_callback=elicit,
                client_info=types.Implementation(name="pytest", version="1"),
            ) as session,
        ):
            await session.initialize()
            yield session


def script(setup: dict[str, Path], code: str) -> list[str]:
    """argv running ``code`` from a file in the workspace (inline code always asks).

    The interpreter is named by its real path: a virtual environment under /tmp is not
    there inside a sandbox, which has a /tmp of its own.
    """
    path = setup["ws"] / f"script-{random.randrange(1 << 32):08x}.py"
    path.write_text(code, encoding="utf-8")
    return [os.path.realpath(sys.executable), path.name]


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


def unique_sleep() -> str:
    """A sleep duration no other process has on its command line."""
    return f"{40 + random.random():.9f}"


def processes_with(arg: str) -> list[int]:
    """The pids whose argv is ``sleep ARG``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[:2] == [b"sleep", arg.encode()]:
            found.append(int(name))
    return found


async def until(check: Callable[[], object], timeout: float = 60.0) -> None:
    """Wait for ``check`` to hold: an event, polled, under a generous cap (never a timing)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        await anyio.sleep(0.05)


def answering(action: str, asked: list[str]) -> Elicit:
    async def elicit(_context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        content = {"approve": True} if action == "accept" else None
        return types.ElicitResult(action=action, content=content)

    return elicit
