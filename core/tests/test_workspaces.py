"""Agent workspaces: a folder of their own, named folders that are safe, one run at a time."""

from __future__ import annotations

import json
import os
import subprocess
import threading

import pytest

from stockade.config.schema import Config, StoreConfig
from stockade.errors import UnsafeRoot
from stockade.request.spec import ExecRequest, Profile
from stockade.testing import CLI
from stockade.workspace.folders import WorkspaceBusy

FULL = {"mode": "danger-full-access"}


def config(tmp_path, **profiles: Profile) -> Config:
    named = {name: Profile(name=name, **vars_of(p)) for name, p in profiles.items()}
    return Config(agents=named, store=StoreConfig(str(tmp_path / "state" / "store.db")))


def vars_of(profile: Profile) -> dict[str, object]:
    import attrs

    return {k: v for k, v in attrs.asdict(profile, recurse=False).items() if k != "name"}


def test_an_agent_without_a_workspace_gets_a_private_one_kept_between_runs(make_host, tmp_path):
    cfg = config(tmp_path, ci=Profile(ask=()))
    first = make_host(config=cfg).run(ExecRequest(["touch", "kept"], profile="ci", **FULL))
    own = tmp_path / "state" / "workspaces" / "ci"
    assert first.ok and (own / "kept").exists()
    assert os.stat(own).st_mode & 0o777 == 0o700
    again = make_host(config=cfg).run(ExecRequest(["ls"], profile="ci", **FULL))
    assert again.stdout.text == "kept\n"
    # The person's own default profile still works where they are.
    here = make_host(config=cfg).run(ExecRequest(["pwd"], str(tmp_path), **FULL))
    assert here.stdout.text == f"{tmp_path}\n"


@pytest.mark.parametrize(
    ("folder", "rule"),
    [("/", "root"), ("/etc", "system"), ("/usr", "system"), ("/usr/local", "system")],
)
def test_a_named_workspace_may_not_be_a_system_folder(make_host, tmp_path, folder, rule):
    host = make_host(config=config(tmp_path, ci=Profile(workspace=folder)))
    with pytest.raises(UnsafeRoot, match=r"agents\.ci\.workspace") as caught:
        host.run(ExecRequest(["true"], profile="ci", **FULL))
    assert caught.value.details["rule"] == rule


def test_a_named_workspace_may_not_be_or_hold_the_store(make_host, tmp_path):
    for folder, rule in (
        (tmp_path, "holds_store"),
        (tmp_path / "state", "store"),
        (tmp_path / "state" / "blobs", "store"),
        (tmp_path / "state" / "workspaces", "store"),
    ):
        folder.mkdir(parents=True, exist_ok=True)
        host = make_host(config=config(tmp_path, ci=Profile(workspace=str(folder))))
        with pytest.raises(UnsafeRoot) as caught:
            host.run(ExecRequest(["true"], profile="ci", **FULL))
        assert caught.value.details["rule"] == rule, folder
    # The control: another agent's own folder inside the store's workspaces/ may be named.
    other = tmp_path / "state" / "workspaces" / "other"
    other.mkdir()
    host = make_host(config=config(tmp_path, ci=Profile(workspace=str(other), ask=())))
    assert host.run(ExecRequest(["true"], profile="ci", **FULL)).ok


def test_a_named_workspace_may_not_be_a_home(make_host, tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / "project").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for folder, rule in (("~", "home"), (str(tmp_path), "holds_home")):
        host = make_host(config=config(tmp_path / "s", ci=Profile(workspace=folder)))
        with pytest.raises(UnsafeRoot) as caught:
            host.run(ExecRequest(["true"], profile="ci", **FULL))
        assert caught.value.details["rule"] == rule, folder
    # The control: a home's subfolder is where projects live.
    host = make_host(config=config(tmp_path / "s", ci=Profile(workspace="~/project", ask=())))
    assert host.run(ExecRequest(["pwd"], profile="ci", **FULL)).stdout.text == f"{home}/project\n"


def test_one_run_at_a_time_in_a_workspace(make_host, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    cfg = config(tmp_path, ci=Profile(workspace=str(ws), ask=()))
    first, second = make_host(config=cfg), make_host(config=cfg)
    started = ws / "started"
    script = f"touch {started}; while [ ! -e {ws}/go ]; do sleep 0.01; done"
    results = []
    worker = threading.Thread(
        target=lambda: results.append(
            first.run(ExecRequest(["sh", "-c", script], profile="ci", preapproved=True, **FULL))
        )
    )
    worker.start()
    try:
        while not started.exists():
            threading.Event().wait(0.01)
        with pytest.raises(WorkspaceBusy, match=f"in use by run {first.run_id}") as caught:
            second.run(ExecRequest(["touch", "x"], profile="ci", **FULL))
        assert caught.value.details["holder"] == first.run_id
        assert not (ws / "x").exists()
        # The same run may run more steps there at once.
        assert first.run(ExecRequest(["true"], profile="ci", **FULL)).ok
    finally:
        (ws / "go").touch()
        worker.join(timeout=30)
    assert results[0].ok
    assert second.run(ExecRequest(["touch", "x"], profile="ci", **FULL)).ok  # released


def test_stockade_workspace_shows_and_clears_with_a_record(tmp_path):
    state = tmp_path / "xdg"
    cfg = tmp_path / "stockade.toml"
    cfg.write_text("[agents.ci]\nask = []\n")
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(state),
        "STOCKADE_DISABLE_PLUGINS": "bubblewrap,landlock",
    }
    stockade = [*CLI, "--config", str(cfg)]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*stockade, *args], env=env, capture_output=True, text=True, timeout=60, check=False
        )

    made = cli(
        "run", "--agent", "ci", "--mode", "danger-full-access", "--", "mkdir", "-p", "cache/x"
    )
    assert made.returncode == 0, made.stderr
    pip = state / "stockade" / "caches" / "ci" / "pip"
    (pip / "wheel").write_text("cached")  # the agent's kept cache, cleared with it
    shown = json.loads(cli("workspace", "ci", "--json").stdout)
    assert shown["path"] == str(state / "stockade" / "workspaces" / "ci")
    cleared = json.loads(cli("workspace", "ci", "--clear", "--json").stdout)
    assert cleared["removed"] == 2 and cleared["files"] == 0
    assert os.listdir(shown["path"]) == [] and os.listdir(pip) == []
    steps = cli("replay", json.loads(cli("log", "--json").stdout)[0]["run_id"], "--json")
    assert steps.returncode == 0
    from stockade.record.chain import rows
    from stockade.record.store import Store

    store = Store(str(state / "stockade" / "store.db"))
    kinds = [r.kind for r in rows(store)]
    [event] = [r.body for r in rows(store) if r.kind == "workspace"]
    store.close()
    assert kinds[-1] == "workspace"
    assert (event["agent"], event["action"], event["removed"]) == ("ci", "clear", 2)
    assert cli("workspace", "nobody").returncode == 125


def test_an_approved_step_waits_for_a_busy_workspace_and_stays_approved(make_host, tmp_path):
    from stockade.errors import PolicyHeld
    from stockade.workspace.folders import Locks

    ws = tmp_path / "ws"
    ws.mkdir()
    cfg = config(tmp_path, ci=Profile(workspace=str(ws)))
    agent = make_host(config=cfg)
    with pytest.raises(PolicyHeld) as caught:
        agent.run(ExecRequest(["rm", "-f", "gone"], profile="ci", **FULL))
    run, step = caught.value.details["run_id"], caught.value.details["step"]
    agent.answer(run, step, approve=True, by="alice")
    other = Locks(cfg, "r-other")
    with other.hold(str(ws)), pytest.raises(WorkspaceBusy, match="r-other"):
        agent.resume(run, step)
    assert agent.store.get(run, step).state == "approved"  # not spent by the refusal
    assert agent.resume(run, step).ok


def test_quota_usage_counts_allocated_bytes_and_each_inode_once(tmp_path):
    from stockade.run.quota import MIB, usage

    (tmp_path / "d").mkdir()
    data = tmp_path / "d" / "data"
    data.write_bytes(b"\1" * MIB)
    os.sync()
    one = usage(str(tmp_path))
    assert one >= MIB
    os.link(data, tmp_path / "twin")  # a hard link adds no bytes
    (tmp_path / "link").symlink_to("/usr")  # a symlink is not followed
    with open(tmp_path / "sparse", "wb") as handle:  # a hole costs nothing
        handle.truncate(512 * MIB)
    assert usage(str(tmp_path)) < one + MIB
