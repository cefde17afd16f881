"""The breaker through the command line (the warm server keeping a run across calls) and
through the real ``stockade mcp`` (its elicitation), with real commands in the strongest
sandbox here and a live upstream that counts what reaches it.

Each attack has its control: the same request from a run that holds only somebody else's
words reaches the upstream.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import recording
from helpers.mcp_session import answering, connect, make_setup, text_of
from helpers.recording import Upstream, post
from helpers.server import Stockade, stockade_for

CANARY = "PRIVATE-CANARY-6f1d"


def agent_toml(ws: Path, port: int) -> str:
    return f"""\
[network]
resolve = {{ "allowed.test" = "127.0.0.1" }}

[agents.b]
workspace = "{ws}"
ask = []
hosts = ["allowed.test:{port}"]
private = ["private/*"]

"""


def plant(ws: Path) -> None:
    (ws / "private").mkdir()
    (ws / "private" / "notes.txt").write_text(CANARY + "\n")
    (ws / "readme.txt").write_text("somebody else's words\n")


# --- the command line, through the warm server ------------------------------------------------


def configure(sk: Stockade, port: int) -> None:
    """A planted workspace and the agent ``b`` allowed the upstream, for ``sk``'s calls."""
    ws = sk.root / "ws"
    ws.mkdir()
    plant(ws)
    config = sk.root / "stockade.toml"
    config.write_text(agent_toml(ws, port))
    sk.env["STOCKADE_CONFIG"] = str(config)


@pytest.fixture
def sk(tmp_path: Path) -> Iterator[Stockade]:
    with stockade_for(tmp_path) as found:
        found.env["STOCKADE_DISABLE_PLUGINS"] = ""  # the real sandboxes
        yield found


def test_cli_a_kept_run_is_held_with_the_reason_shown(sk: Stockade, upstream: Upstream) -> None:
    configure(sk, upstream.port)
    run = ("run", "--profile", "b", "--run")
    # Control: run r1 reads only somebody else's words; its post reaches the upstream.
    assert sk.run(*run, "r1", "--", "cat", "readme.txt").returncode == 0
    sent = sk.run(*run, "r1", "--", *post(upstream.port, "hello"))
    assert sent.returncode == 0, sent.stderr
    assert upstream.seen == [b"/ hello"]
    # Without a grant the canary is hidden from the command, and run r0 holds nothing private.
    hidden = sk.run(*run, "r0", "--", "cat", "private/notes.txt")
    assert hidden.returncode != 0 and CANARY.encode() not in hidden.stdout
    # Run r2 is granted it in one call, then posts it in the next: held, not sent.
    read = sk.run(*run, "r2", "--read-private", "--", "cat", "private/notes.txt")
    assert read.stdout == CANARY.encode() + b"\n", read.stderr
    held = sk.run(*run, "r2", "--read-private", "--", *post(upstream.port, "@private/notes.txt"))
    assert held.returncode == 126, held.stderr
    assert b"the breaker: this run holds private data (grant read-private: private/notes.txt" in (
        held.stderr
    )
    assert upstream.seen == [b"/ hello"]
    # `stockade pending` shows the breaker's reason.
    pending = sk.run("pending")
    assert b"asks:   the breaker: this run holds private data" in pending.stdout
    assert b"output step 1: cat private/notes.txt" in pending.stdout
    [step] = json.loads(sk.run("pending", "--json").stdout)
    assert step["decision"]["by"] == "breaker"
    # A person approves it: then it runs, and reaches the upstream.
    done = sk.run("approve", "r2", str(step["step"]))
    assert done.returncode == 0, done.stderr
    assert upstream.seen[-1] == b"/ " + CANARY.encode() + b"\n"


@pytest.fixture
def kept() -> Iterator[Upstream]:
    yield from recording.serving(keep_alive=True)


def test_cli_a_task_s_kept_connection_sends_nothing_once_the_run_holds_both(
    sk: Stockade, kept: Upstream
) -> None:
    """Through the warm server: a background task started while its run was clean keeps its
    tunnel; its upload over it, after another call granted the run the private notes, never
    leaves. (The control, the opt-out, is in tests/security/test_breaker_proxy.py.)"""
    configure(sk, kept.port)
    (sk.root / "ws" / "data.txt").write_text("nothing yet\n")
    run = ("--profile", "b", "--run", "r7")
    assert sk.run("run", *run, "--", "cat", "readme.txt").returncode == 0
    started = sk.run(
        "start", *run, "--json", "--", *recording.kept_then_puts(kept.port, "data.txt")
    )
    assert started.returncode == 0, started.stderr
    task = json.loads(started.stdout)["task_id"]
    assert kept.waiting.wait(30), "the task never reached the upstream"
    copied = sk.run("run", *run, "--read-private", "--", "cp", "private/notes.txt", "data.txt")
    assert copied.returncode == 0, copied.stderr
    kept.go_on.set()
    ended = sk.run("read", task, "--follow", "--run", "r7")  # its status is the task's
    assert ended.stdout == b"ok\n", ended.stderr  # the first answer came, while clean
    assert kept.seen == [b"/wait "]  # the upload never left
    log = json.loads(sk.run("replay", "--json", "r7", server=False).stdout)
    cut = [e for e in log if e["kind"] == "connection" and "the breaker" in e["text"]]
    assert cut, [e["text"] for e in log if e["kind"] == "connection"]


def test_cli_a_file_tool_taints_the_kept_run(sk: Stockade, upstream: Upstream) -> None:
    configure(sk, upstream.port)
    # The file tool runs in the client's own process; the server's kept run sees its taint
    # through the record.
    assert sk.run("run", "--profile", "b", "--run", "r3", "--", "true").returncode == 0
    refused = sk.run("file", "read", "--profile", "b", "--run", "r3", "private/notes.txt")
    assert refused.returncode != 0 and b"private data" in refused.stderr, refused.stderr
    assert CANARY.encode() not in refused.stdout
    read = sk.run(
        "file", "read", "--profile", "b", "--run", "r3", "--read-private", "private/notes.txt"
    )
    assert read.returncode == 0 and read.stdout == CANARY.encode() + b"\n", read.stderr
    held = sk.run("run", "--profile", "b", "--run", "r3", "--", *post(upstream.port, "x"))
    assert held.returncode == 126, held.stderr
    assert b"file_read private/notes.txt" in held.stderr
    assert upstream.seen == []
    # Without a run, a file tool taints nothing: the control run's post goes out.
    granted = ("file", "read", "--profile", "b", "--read-private", "private/notes.txt")
    assert sk.run(*granted).returncode == 0
    assert sk.run("run", "--profile", "b", "--run", "r4", "--", "cat", "readme.txt").returncode == 0
    sent = sk.run("run", "--profile", "b", "--run", "r4", "--", *post(upstream.port, "y"))
    assert sent.returncode == 0, sent.stderr
    assert upstream.seen == [b"/ y"]
    # The record has the taints, with their sources; the chain verifies.
    log = json.loads(sk.run("replay", "--json", "r3", server=False).stdout)
    taints = [e["text"] for e in log if e["kind"] == "taint"]
    assert "the run holds untrusted (file_read): private/notes.txt" in taints
    assert sk.run("verify", server=False).returncode == 0


def test_cli_a_kept_run_keeps_its_taint_across_a_server_restart(
    sk: Stockade, upstream: Upstream
) -> None:
    configure(sk, upstream.port)
    run = ("run", "--profile", "b", "--run", "r5")
    assert sk.run(*run, "--read-private", "--", "cat", "private/notes.txt").returncode == 0
    first = sk.wait_server()
    sk.stop()  # the server that kept run r5 is gone, and its memory with it
    held = sk.run(*run, "--", *post(upstream.port, "x"))
    assert sk.wait_server() != first  # a new server took the call
    assert held.returncode == 126, held.stderr
    assert b"grant read-private: private/notes.txt" in held.stderr
    assert upstream.seen == []


# --- MCP --------------------------------------------------------------------------------------


@pytest.fixture
def setup(tmp_path: Path, upstream: Upstream) -> dict[str, Path]:
    found = make_setup(tmp_path, agent_toml(tmp_path / "ws", upstream.port))
    plant(found["ws"])
    return found


@pytest.mark.asyncio
async def test_mcp_the_elicitation_shows_the_reason(setup, upstream: Upstream) -> None:
    asked: list[str] = []
    async with connect(setup, "b", elicit=answering("decline", asked)) as session:
        refused = await session.call_tool("file_read", {"path": "private/notes.txt"})
        assert refused.is_error and CANARY not in text_of(refused)
        read = await session.call_tool(
            "file_read", {"path": "private/notes.txt", "read_private": True}
        )
        assert CANARY in text_of(read)
        sent = await session.call_tool(
            "run_command",
            {"argv": post(upstream.port, "@private/notes.txt"), "read_private": True},
        )
    assert sent.is_error and sent.structured_content["code"] == "policy_denied"
    [question] = asked
    assert "asks:   the breaker: this run holds private data (private-path" in question
    assert "file_read private/notes.txt" in question
    assert upstream.seen == []
    # Control: a session that read only somebody else's words posts without a question.
    async with connect(setup, "b", elicit=answering("decline", asked)) as session:
        await session.call_tool("file_read", {"path": "readme.txt"})
        sent = await session.call_tool("run_command", {"argv": post(upstream.port, "hi")})
    assert not sent.is_error, text_of(sent)
    assert upstream.seen == [b"/ hi"] and len(asked) == 1


@pytest.mark.asyncio
async def test_mcp_a_file_written_after_private_data_stays_private(
    setup, upstream: Upstream
) -> None:
    asked: list[str] = []
    async with connect(setup, "b", elicit=answering("decline", asked)) as session:
        await session.call_tool("file_read", {"path": "private/notes.txt", "read_private": True})
        await session.call_tool("file_write", {"path": "summary.txt", "content": CANARY})
    # The next session (a run of its own) cannot read the summary unless granted it.
    async with connect(setup, "b", elicit=answering("decline", asked)) as session:
        hidden = await session.call_tool("run_command", {"argv": ["cat", "summary.txt"]})
        assert CANARY not in text_of(hidden)
        sent = await session.call_tool(
            "run_command", {"argv": post(upstream.port, "@summary.txt"), "read_private": True}
        )
    assert sent.is_error
    [question] = asked
    assert "grant read-private: private/notes.txt, summary.txt" in question
    assert "output step 1: cat summary.txt" in question
    assert upstream.seen == []


@pytest.mark.asyncio
async def test_mcp_a_task_s_kept_connection_sends_nothing_once_the_session_holds_both(
    tmp_path: Path, kept: Upstream
) -> None:
    """Over MCP: a task started while the connection's run was clean keeps its tunnel; once a
    granted step makes the run hold both, its upload over that tunnel never leaves."""
    import asyncio

    found = make_setup(tmp_path, agent_toml(tmp_path / "ws", kept.port))
    plant(found["ws"])
    (found["ws"] / "data.txt").write_text("nothing yet\n")
    asked: list[str] = []
    async with connect(found, "b", elicit=answering("decline", asked)) as session:
        await session.call_tool("file_read", {"path": "readme.txt"})  # somebody else's words
        argv = recording.kept_then_puts(kept.port, "data.txt")
        started = await session.call_tool("start_command", {"argv": argv})
        assert not started.is_error, text_of(started)
        task = started.structured_content["task_id"]
        assert await asyncio.to_thread(kept.waiting.wait, 30), "the task never reached it"
        copied = await session.call_tool(
            "run_command", {"argv": ["cp", "private/notes.txt", "data.txt"], "read_private": True}
        )
        assert not copied.is_error, text_of(copied)
        kept.go_on.set()
        for _ in range(300):
            out = await session.call_tool("read_output", {"task_id": task})
            if out.structured_content["status"] != "running":
                break
            await asyncio.sleep(0.1)
    assert out.structured_content["status"] != "running"
    assert kept.seen == [b"/wait "]  # the upload never left
    assert asked == []  # nothing was asked: the task was admitted while the run was clean


# --- the run page -----------------------------------------------------------------------------


def test_the_run_page_shows_the_reason_and_the_taints(tmp_path: Path, monkeypatch) -> None:
    from helpers.ui import Ui  # the run page's own server helper
    from stockade.errors import PolicyHeld
    from stockade.request.spec import ExecRequest

    monkeypatch.setenv("STOCKADE_SECRET_GH", "s3cret-value")
    ui = Ui(tmp_path)
    try:
        (ui.ws / "readme.txt").write_text("somebody else's words\n")
        ui.run(["cat", "readme.txt"])
        ui.run(["curl", "--version"])  # control: no private data yet, it runs
        with pytest.raises(PolicyHeld) as held:
            ui.agent.run(
                ExecRequest(["curl", "--version"], profile="careful", credentials={"T": "gh"})
            )
        run, step = held.value.details["run_id"], held.value.details["step"]
        page = ui.page(f"/runs/{run}")
    finally:
        ui.stop()
    assert step == 3
    assert "the breaker: this run holds private data (credential T (handle gh)) and has read" in (
        page
    )
    assert "words (output step 1: cat readme.txt; network step 2: curl --version)" in page
    assert "the run holds somebody else&#39;s words: output step 1: cat readme.txt" in page
    assert "the run holds private data: credential T (handle gh)" in page
    assert "s3cret-value" not in page
