"""embedding.md tells the truth: its functions (docs/examples/embedding.py) run a tool call,
an approved held step, many commands at once, and open a host from the configuration."""

from __future__ import annotations

import asyncio

import pytest

from helpers.docs import FULL_ACCESS, example
from stockade.errors import PolicyHeld
from stockade.request.spec import ExecRequest

# --- embedding ----------------------------------------------------------------------------


def test_run_tool_call(make_host, tmp_path):
    embedding = example("embedding")
    host = make_host(plugins=[example("example_plugin")])
    (tmp_path / "a").write_text("")
    assert embedding.run_tool_call(host, ["ls"], str(tmp_path)) == {
        "exit_code": 0,
        "signal": None,
        "timed_out": False,
        "stdout": "a\n",
        "stderr": "",
        "truncated": False,
    }
    denied = embedding.run_tool_call(host, ["rm", "a"], str(tmp_path))  # destroys: denied
    assert denied["error"]["code"] == "policy_denied"  # type: ignore[index]
    assert (tmp_path / "a").exists()
    held = embedding.run_tool_call(host, ["touch", "b"], str(tmp_path))  # writes: asks
    error = held["error"]
    assert error["code"] == "policy_held"  # type: ignore[index]
    assert error["details"]["run_id"] == host.run_id  # type: ignore[index]
    assert error["details"]["step"] == 3  # type: ignore[index]
    assert not (tmp_path / "b").exists()


def test_run_approved_runs_the_held_step_once(make_host, tmp_path):
    embedding = example("embedding")
    agent = make_host()
    request = ExecRequest(["rm", "a"], str(tmp_path), mode=FULL_ACCESS)  # destroys: asks
    (tmp_path / "a").write_text("")
    with pytest.raises(PolicyHeld) as caught:
        agent.run(request)
    assert (tmp_path / "a").exists()
    person = make_host()  # another host on the same store, as `stockade approve` is
    result = embedding.run_approved(person, caught.value, "alice")
    assert result.ok
    assert not (tmp_path / "a").exists()
    assert (result.decision.verdict, result.decision.by) == ("allow", "alice")
    assert result.decision.reason == "approved: destroys always waits for a person"
    # The agent's host collects the same result; the step never runs twice.
    run_id, step = caught.value.details["run_id"], caught.value.details["step"]
    assert agent.resume(run_id, step) == result


def test_run_all(make_host, tmp_path):
    host = make_host(allow_all=True)
    commands = [["echo", str(n)] for n in range(5)]
    results = asyncio.run(example("embedding").run_all(host, commands, str(tmp_path)))
    assert [r.stdout.text for r in results] == [f"{n}\n" for n in range(5)]


def test_open_host_reads_stockade_config(monkeypatch, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('mode = "read-only"\n')
    monkeypatch.setenv("STOCKADE_CONFIG", str(config))
    with example("embedding").open_host(example("example_plugin")) as host:
        assert host.config.mode == "read-only"
        assert host.config.source == str(config)
