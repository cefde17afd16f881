"""What episodes (stockade-ray) need from the core, without Ray: a run made with profiles of
its own (``Host.for_run(profiles=...)``) counts its own budget in a workspace of its own, and
a held step a person approved is claimed once and decided again to run elsewhere
(``Host.readmit``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade.config.schema import Config, StoreConfig
from stockade.errors import PolicyDenied, PolicyHeld, UsageError
from stockade.host import Host
from stockade.request.spec import Budget, ExecRequest, Profile
from stockade.workspace.folders import workspace_of


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    made = Host(Config(store=StoreConfig(path=str(tmp_path / "state" / "store.db"))))
    yield made
    made.close()


def test_runs_with_profiles_of_their_own_count_their_own_budget(host: Host) -> None:
    runs = [
        host.for_run(profiles={n: Profile(name=n, ask=(), budget=Budget(steps=2))})
        for n in ("ep-a", "ep-b")
    ]
    for _ in range(2):
        for run, name in zip(runs, ("ep-a", "ep-b"), strict=True):
            assert run.run(ExecRequest(("true",), profile=name)).exit_code == 0
    for run, name in zip(runs, ("ep-a", "ep-b"), strict=True):
        with pytest.raises(PolicyDenied, match="budget"):
            run.run(ExecRequest(("true",), profile=name))
    spaces = {
        workspace_of(run.config, run.config.profile(n), own=True)
        for run, n in zip(runs, ("ep-a", "ep-b"), strict=True)
    }
    assert len(spaces) == 2  # a workspace each
    a = runs[0].config.profile("ep-a")
    assert a.budget.steps == 2 and "ep-a" not in host.config.agents  # the run's only
    for run in runs:
        run.close()


def test_an_approved_held_step_is_readmitted_once(host: Host, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    request = ExecRequest(("sh", "-c", "echo readmitted; rm -f none"), str(ws))
    with pytest.raises(PolicyHeld) as held:
        host.run(request)
    run_id, step = held.value.details["run_id"], held.value.details["step"]
    with pytest.raises(PolicyHeld):
        host.readmit(run_id, step)  # nobody has answered yet
    host.answer(run_id, step, approve=True, by="a tester")
    admission = host.readmit(run_id, step)
    assert admission.step.decision.verdict == "allow"
    assert host.store.get(run_id, step).state == "running"
    with pytest.raises(UsageError, match="running"):
        host.readmit(run_id, step)  # claimed once
    carried = host.carry_out(host.prepare(admission))
    result = host.breaker.finish(admission.spec, carried, host.recording.result)
    assert result.stdout.text == "readmitted\n"
