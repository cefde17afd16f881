"""The OpenAI Agents SDK's ``SandboxAgent`` run on Stockade, driven by the SDK's own
``ScriptedModel`` (no network): commands confined and recorded, held steps through the SDK's
tool approval, denials as structured tool results, files, the workspace tar, and what
Stockade refuses."""

from __future__ import annotations

import io
import json
import os
import secrets
from pathlib import Path

import pytest
from agents import Runner
from agents.run_config import RunConfig, SandboxRunConfig
from agents.sandbox import Manifest, SandboxAgent
from agents.sandbox.errors import WorkspaceArchiveWriteError
from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
from agents.testing import ScriptedModel, assistant_message, function_call

import stockade
import stockade_agents
from stockade.config.load import parse_config
from stockade.host import Host
from stockade.testing import FRONT_END_PROFILES
from stockade_agents import StockadeSandboxClient, StockadeSandboxClientOptions

SANDBOXES = ("bubblewrap", "landlock")


def scripted(*cmds: str) -> ScriptedModel:
    """A model that runs ``cmds`` with ``exec_command``, one turn each, then says done."""
    steps: list[object] = [
        [function_call("exec_command", {"cmd": cmd}, call_id=f"call-{i}")]
        for i, cmd in enumerate(cmds)
    ]
    return ScriptedModel([*steps, [assistant_message("done")]])


def tool_outputs(model: ScriptedModel) -> list[str]:
    """What the model was given back by its tools, in order."""
    last = model.calls[-1].input
    return [item["output"] for item in last if item.get("type") == "function_call_output"]


async def run_on(client, model, options=None, manifest=None):
    agent = SandboxAgent(name="builder", model=model, capabilities=[stockade_agents.shell()])
    session = await client.create(manifest=manifest, options=options)
    async with session:
        config = RunConfig(sandbox=SandboxRunConfig(session=session))
        return await Runner.run(agent, "work", run_config=config)


async def run_approving_all(client, model, options=None, manifest=None):
    """Run to the end, a policy approving every held step (confinement must still hold)."""
    agent = SandboxAgent(name="builder", model=model, capabilities=[stockade_agents.shell()])
    session = await client.create(manifest=manifest, options=options)
    async with session:
        config = RunConfig(sandbox=SandboxRunConfig(session=session))
        result = await Runner.run(agent, "work", run_config=config)
        while result.interruptions:
            state = result.to_state()
            for item in result.interruptions:
                state.approve(item)
            result = await Runner.run(agent, state, run_config=config)
    return result


def front_ends(outside: Path) -> dict[Path, str]:
    """Canaries outside the workspace, each written by another program or spelling."""
    c = {name: outside / f"{name}-{secrets.token_hex(4)}" for name in ("sh", "py", "cp", "nest")}
    return {
        c["sh"]: f"echo hi > made.txt && cat made.txt; touch {c['sh']}; echo after",
        c["py"]: f"python3 -c \"open('{c['py']}', 'w').write('x')\"",
        c["cp"]: f"cp made.txt {c['cp']}",
        c["nest"]: f"bash -c 'echo x > {c['nest']}'",
    }


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.asyncio
async def test_a_sandbox_agent_runs_confined_through_stockade(make_host, home_tmp, sandbox):
    host = make_host(sandbox)
    outside = home_tmp / "outside"
    outside.mkdir()
    attacks = front_ends(outside)
    model = scripted(*attacks.values())
    result = await run_approving_all(
        StockadeSandboxClient(host), model, StockadeSandboxClientOptions(profile="tester")
    )
    assert result.final_output == "done"
    outputs = tool_outputs(model)
    assert "hi" in outputs[0] and "after" in outputs[0]
    assert all('{"stockade"' not in output for output in outputs)  # each ran, none refused
    ws = Path(host.config.agents["tester"].workspace or "")
    assert (ws / "made.txt").read_text() == "hi\n"
    # Confined, even approved: the workspace is the only writable root.
    assert [canary for canary in attacks if canary.exists()] == []
    # Control: the SDK's own local client lets the same commands write there.
    control = scripted(*attacks.values())
    await run_approving_all(
        UnixLocalSandboxClient(), control, manifest=Manifest(root=str(home_tmp / "ctl"))
    )
    assert [canary for canary in attacks if not canary.exists()] == []


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.asyncio
async def test_a_held_step_interrupts_the_run_and_runs_once_approved(make_host, sandbox):
    host = make_host(sandbox)
    client = StockadeSandboxClient(host)
    made = Path(host.config.agents["careful"].workspace or "") / "made"
    agent = SandboxAgent(
        name="builder", model=scripted("touch made"), capabilities=[stockade_agents.shell()]
    )
    session = await client.create(options=StockadeSandboxClientOptions(profile="careful"))
    async with session:
        config = RunConfig(sandbox=SandboxRunConfig(session=session))
        first = await Runner.run(agent, "work", run_config=config)
        assert len(first.interruptions) == 1 and first.interruptions[0].name == "exec_command"
        assert not made.exists()  # held: nothing ran before a person answered
        state = first.to_state()
        state.approve(first.interruptions[0])
        second = await Runner.run(agent, state, run_config=config)
        run = stockade_agents.client.inner(session)
        assert run is not None
        run_id = run.host.run_id
    assert second.final_output == "done"
    assert made.exists()
    # Recorded: the action, its hold, the approval (who gave it) and the result.
    from stockade.record.chain import rows

    events = [(row.kind, row.body) for row in rows(host.store, run_id)]
    kinds = [kind for kind, _ in events]
    assert kinds.index("action") < kinds.index("result")
    decisions = [body["decision"] for kind, body in events if kind == "permission"]
    assert [d["verdict"] for d in decisions] == ["ask", "allow"]
    assert decisions[1]["by"] == stockade_agents.session.APPROVED_BY


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.asyncio
async def test_a_rejected_step_never_runs(make_host, sandbox):
    host = make_host(sandbox)
    client = StockadeSandboxClient(host)
    made = Path(host.config.agents["careful"].workspace or "") / "made"
    model = scripted("touch made")
    agent = SandboxAgent(name="builder", model=model, capabilities=[stockade_agents.shell()])
    session = await client.create(options=StockadeSandboxClientOptions(profile="careful"))
    async with session:
        config = RunConfig(sandbox=SandboxRunConfig(session=session))
        first = await Runner.run(agent, "work", run_config=config)
        (held,) = session.state.held
        assert [step.step for step in host.store.waiting()] == [held.step]  # control
        state = first.to_state()
        state.reject(first.interruptions[0])
        second = await Runner.run(agent, state, run_config=config)
    assert second.final_output == "done"
    assert not made.exists()
    (output,) = tool_outputs(model)
    assert output == "Tool execution was not approved."
    # Declined in Stockade's store: `stockade pending` is empty, the record says declined.
    assert session.state.held == ()
    assert host.store.waiting() == []
    found = host.store.get(held.run_id, held.step)
    assert found.state == "declined" and found.answered_by == stockade_agents.session.APPROVED_BY
    from stockade.record.chain import rows

    declines = [row.body for row in rows(host.store, held.run_id) if row.kind == "decline"]
    assert [body["reason"] for body in declines] == [stockade_agents.session.REJECTED]


@pytest.mark.parametrize("approve", [True, False])
@pytest.mark.asyncio
async def test_an_answer_reaches_a_step_the_runner_stopped_its_session_for(make_host, approve):
    # The runner owns the session: it stops it at the interruption and resumes it from the
    # RunState, here through its JSON; the held step travels in the session state.
    from agents import RunState

    host = make_host("landlock")
    made = Path(host.config.agents["careful"].workspace or "") / "made"
    agent = SandboxAgent(
        name="builder", model=scripted("touch made"), capabilities=[stockade_agents.shell()]
    )
    config = RunConfig(
        sandbox=SandboxRunConfig(
            client=StockadeSandboxClient(host),
            options=StockadeSandboxClientOptions(profile="careful"),
        )
    )
    first = await Runner.run(agent, "work", run_config=config)
    assert not made.exists()
    (held,) = host.store.waiting()
    state = await RunState.from_string(agent, first.to_state().to_string())
    (state.approve if approve else state.reject)(state.get_interruptions()[0])
    second = await Runner.run(agent, state, run_config=config)
    assert second.final_output == "done" and made.exists() is approve
    assert host.store.waiting() == []
    assert host.store.get(held.run_id, held.step).state == ("done" if approve else "declined")


@pytest.mark.asyncio
async def test_a_state_naming_another_commands_held_step_is_not_approved(make_host):
    host = make_host("landlock")
    client = StockadeSandboxClient(host)
    ws = Path(host.config.agents["careful"].workspace or "")
    session = await client.create(options=StockadeSandboxClientOptions(profile="careful"))
    async with session:
        run = stockade_agents.client.inner(session)
        assert run is not None
        assert await run.admit(("sh", "-lc", "touch other"), None)
        (held,) = run.state.held
        # A tampered RunState pairs that held step with a command the person approved.
        run.state.held = (held.model_copy(update={"argv": ("sh", "-lc", "true")}),)
        result = await session.exec("true")
    assert result.exit_code == stockade_agents.REFUSED
    assert b"not this call's command" in result.stderr
    assert not (ws / "other").exists()
    assert host.store.get(held.run_id, held.step).state == "held"


@pytest.mark.asyncio
async def test_a_denied_step_is_a_structured_tool_result(make_host):
    host = make_host("landlock")
    model = scripted("rm -rf .")
    (ws := Path(host.config.agents["echoer"].workspace or "")).joinpath("keep").write_text("x")
    await run_on(StockadeSandboxClient(host), model, StockadeSandboxClientOptions(profile="echoer"))
    (output,) = tool_outputs(model)
    body = json.loads(output.split("Output:\n", 1)[1])
    assert body["stockade"]["code"] == "policy_denied"
    assert "exited with code 126" in output
    assert (ws / "keep").exists()


@pytest.mark.asyncio
async def test_files_go_through_the_file_tools(make_host):
    client = StockadeSandboxClient(make_host("landlock"))
    session = await client.create(options=StockadeSandboxClientOptions(profile="tester"))
    async with session:
        await session.write(Path("notes/a.txt"), io.BytesIO(b"written\n"))
        assert (await session.read(Path("notes/a.txt"))).read() == b"written\n"
        with pytest.raises(WorkspaceArchiveWriteError, match=r"\.git"):
            await session.write(Path(".git/config"), io.BytesIO(b"[core]\n"))
        tar = await session.persist_workspace()
        data = tar.read()
    other = StockadeSandboxClient(make_host("bubblewrap"))
    root = Path(session.state.manifest.root).parent / "restored"
    restored = await other.create(manifest=Manifest(root=str(root)))
    async with restored:
        await restored.hydrate_workspace(io.BytesIO(data))
    assert (root / "notes" / "a.txt").read_text() == "written\n"


@pytest.mark.asyncio
async def test_what_stockade_does_not_offer_is_refused(make_host):
    client = StockadeSandboxClient(make_host("landlock"))
    with pytest.raises(ValueError, match="exposes no ports"):
        await client.create(
            options=StockadeSandboxClientOptions(profile="tester", exposed_ports=(8080,))
        )
    session = await client.create(options=StockadeSandboxClientOptions(profile="tester"))
    async with session:
        assert not session.supports_pty()
        with pytest.raises(NotImplementedError, match=r"no\s+pty"):
            await session.pty_exec_start("true")
        with pytest.raises(ValueError, match="does not switch"):
            await session.exec("true", user="root")


@pytest.mark.parametrize("approve", [True, False])
@pytest.mark.asyncio
async def test_the_docs_example_runs_and_asks(docs_example, tmp_path, approve):
    from stockade.config.load import parse_config
    from stockade.host import Host

    example = docs_example
    ws = tmp_path / "ws"
    ws.mkdir()
    asked = []

    def answer(item):
        asked.append(item.arguments)
        return approve

    with Host(parse_config('sandbox = "landlock"\n[agents.default]\nask = ["writes"]\n')) as host:
        final = await example.run(host, str(ws), example.offline_model(), answer)
    assert final == "hello.py written and run"
    assert len(asked) == 1 and "hello.py" in asked[0]
    assert (ws / "hello.py").exists() is approve


@pytest.mark.asyncio
async def test_cancelling_the_awaiting_task_kills_the_command(make_host):
    import asyncio

    host = make_host("landlock")
    client = StockadeSandboxClient(host)
    ws = Path(host.config.agents["tester"].workspace or "")
    session = await client.create(options=StockadeSandboxClientOptions(profile="tester"))
    async with session:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(session.exec("sleep 1.5 && touch late"), 0.5)
        await asyncio.sleep(2)
        control = await session.exec("touch early")
    assert control.exit_code == 0 and (ws / "early").exists()
    assert not (ws / "late").exists()


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.asyncio
async def test_a_script_that_only_reads_runs_without_asking(make_host, sandbox):
    # The SDK's shell tool sends `sh -lc SCRIPT` (with `cd DIR || exit` for a workdir): read by
    # its parts, a script of reads is `reads`, so a profile that asks for writes runs it.
    host = make_host(sandbox)
    ws = Path(host.config.agents["careful"].workspace or "")
    (ws / "sub").mkdir()
    (ws / "sub" / "notes.txt").write_text("from the workspace\n")
    model = ScriptedModel(
        [
            [
                function_call(
                    "exec_command",
                    {"cmd": "ls && cat notes.txt", "workdir": "sub"},
                    call_id="call-0",
                )
            ],
            [assistant_message("done")],
        ]
    )
    result = await run_on(
        StockadeSandboxClient(host), model, StockadeSandboxClientOptions(profile="careful")
    )
    assert result.interruptions == [] and result.final_output == "done"
    (output,) = tool_outputs(model)
    assert "from the workspace" in output and "exited with code 0" in output


@pytest.mark.asyncio
async def test_file_operations_never_leave_the_workspace(make_host, home_tmp):
    from agents.sandbox.errors import (
        InvalidManifestPathError,
        WorkspaceArchiveReadError,
        WorkspaceReadNotFoundError,
    )

    host = make_host("landlock")
    ws = Path(host.config.agents["tester"].workspace or "")
    outside = home_tmp / "outside"
    outside.mkdir()
    (outside / "secret").write_text("outside\n")
    (ws / "out").symlink_to(outside)
    (ws / "link").symlink_to(outside / "secret")
    (ws / "hard").hardlink_to(outside / "secret")
    client = StockadeSandboxClient(host)
    session = await client.create(options=StockadeSandboxClientOptions(profile="tester"))
    async with session:
        for path in ("out/secret", "link", "hard"):
            with pytest.raises((WorkspaceArchiveReadError, WorkspaceReadNotFoundError)):
                await session.read(Path(path))
        for path in ("out/planted", "link"):
            with pytest.raises(WorkspaceArchiveWriteError):
                await session.write(Path(path), io.BytesIO(b"planted\n"))
        for path in ("../planted", "/etc/planted", str(outside / "planted")):
            with pytest.raises((InvalidManifestPathError, WorkspaceArchiveWriteError)):
                await session.write(Path(path), io.BytesIO(b"planted\n"))
        # Control: the same calls inside the workspace work.
        await session.write(Path("inside"), io.BytesIO(b"ok\n"))
        assert (await session.read(Path("inside"))).read() == b"ok\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_text() == "outside\n"


class Batches:
    """A recorder that keeps what each batch held: the kinds and action ids of its events."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, str]]] = []

    @stockade.hookimpl
    def stockade_record_batch(self, events) -> None:
        self.batches.append([(event.kind, event.action_id) for event in events])


@pytest.mark.asyncio
async def test_a_steps_result_and_its_taints_are_one_batch(home_tmp):
    # The SDK's calls are admitted first (to ask before the tool runs), then carried out: the
    # result and what the step's output taints its run with are stored together, as Host.run
    # stores them; stored apart, a host killed between the two loses the taint.
    spy, ws = Batches(), home_tmp / "ws"
    ws.mkdir()
    config = parse_config('sandbox = "landlock"\n' + FRONT_END_PROFILES.format(ws=ws))
    host = Host(config, environ=dict(os.environ), plugins=[spy])
    try:
        model = scripted("echo tainting")
        result = await run_on(
            StockadeSandboxClient(host), model, StockadeSandboxClientOptions(profile="tester")
        )
    finally:
        host.close()
    assert result.final_output == "done" and "tainting" in tool_outputs(model)[0]
    (batch,) = [b for b in spy.batches if any(kind == "result" for kind, _ in b)]
    (action,) = {action for kind, action in batch if kind == "result"}
    assert ("taint", action) in batch, batch
