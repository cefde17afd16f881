"""Stockade as the OpenAI Agents SDK's sandbox (tested by contrib/agents/tests).

    uv run python docs/examples/agents_sdk.py WORKSPACE

Runs offline with the SDK's ``ScriptedModel``; pass a real model (``model="gpt-5.4"`` with
``OPENAI_API_KEY`` set) to :func:`run` for a real agent. Every command the agent runs is a
step of a Stockade run: classified, decided, confined and recorded.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

from agents import Model, Runner, ToolApprovalItem
from agents.run_config import RunConfig, SandboxRunConfig
from agents.sandbox import Manifest, SandboxAgent
from agents.testing import ScriptedModel, assistant_message, function_call

import stockade_agents
from stockade.host import Host
from stockade_agents import StockadeSandboxClient


# --8<-- [start:run]
async def run(
    host: Host,
    workspace: str,
    model: str | Model,
    answer: Callable[[ToolApprovalItem], bool],
    task: str = "Write a hello-world script and run it.",
) -> str:
    """Run a sandbox agent on Stockade; ``answer`` approves or rejects each held step."""
    agent = SandboxAgent(
        name="builder",
        model=model,
        instructions="You work in a confined workspace.",
        capabilities=[stockade_agents.shell()],  # exec_command asks Stockade's policy
    )
    client = StockadeSandboxClient(host)
    session = await client.create(manifest=Manifest(root=workspace))
    async with session:  # one session, one Stockade run
        config = RunConfig(sandbox=SandboxRunConfig(session=session))
        result = await Runner.run(agent, task, run_config=config)
        while result.interruptions:  # steps the policy holds for a person
            state = result.to_state()
            for item in result.interruptions:
                if answer(item):
                    state.approve(item)
                else:
                    state.reject(item)  # never runs; the model reads "not approved"
            result = await Runner.run(agent, state, run_config=config)
    return str(result.final_output)


# --8<-- [end:run]


# --8<-- [start:answer]
def ask_a_person(item: ToolApprovalItem) -> bool:
    """A person answers at the terminal, shown the exact command."""
    reply = input(f"run {item.arguments}? [y/N] ")
    return reply.strip().lower() in ("y", "yes")


# --8<-- [end:answer]


# --8<-- [start:snapshot]
async def keep_and_fork(host: Host, workspace: str, copies: int) -> list[str]:
    """Work in a session whose stop takes a Stockade snapshot; fork that snapshot."""
    client = StockadeSandboxClient(host)
    session = await client.create(
        manifest=Manifest(root=workspace), snapshot=stockade_agents.StockadeSnapshotSpec()
    )
    async with session:  # stopping it (here, at the end) takes the snapshot
        await session.exec("echo draft > notes.txt")
    # session.state.snapshot is a StockadeSnapshot: .taken names it in the store
    resumed = await client.resume(session.state)  # the workspace put back as it was
    async with resumed:
        await resumed.exec("echo more >> notes.txt")  # its stop replaces the snapshot
    forks = client.fork(resumed.state.snapshot, copies)  # Manifests sharing its files
    return [str(manifest.root) for manifest in forks]


# --8<-- [end:snapshot]


def offline_model() -> ScriptedModel:
    """A scripted model: one command that writes (held when writes ask), then done."""
    script = "printf 'print(\"hello\")\\n' > hello.py && python3 hello.py"
    return ScriptedModel(
        [
            [function_call("exec_command", {"cmd": script}, call_id="call-1")],
            [assistant_message("hello.py written and run")],
        ]
    )


if __name__ == "__main__":
    with Host.from_environment() as host:
        print(asyncio.run(run(host, sys.argv[1], offline_model(), ask_a_person)))
