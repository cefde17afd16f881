"""The boundary between deciding and doing: the admitted step, its wire form, one lookup.

A step admitted by one host travels as JSON to a doer that knows nothing of the decision
(as a warm server or a remote worker will), is carried out there, and comes back as a
``Carried`` that the deciding host records: the record verifies, and the result is the one
an in-process run gives.
"""

from __future__ import annotations

import json
import os

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stockade.config.schema import Config, StoreConfig
from stockade.errors import PolicyHeld, UsageError
from stockade.record.chain import rows
from stockade.record.verify import verify
from stockade.request.spec import ExecRequest, Profile
from stockade.request.step import AdmittedStep, Agent, Carried, EgressRule
from stockade.request.verdict import Classification, Decision
from stockade.request.wire import step_from_json, step_to_json
from stockade.run.doer import Doer

FULL = {"mode": "danger-full-access"}


def agents(tmp_path, **profiles: Profile) -> Config:
    named = {name: attrs.evolve(p, name=name) for name, p in profiles.items()}
    store = tmp_path.with_name(tmp_path.name + "-state") / "store.db"
    return Config(agents=named, store=StoreConfig(str(store)))


def test_a_step_carried_out_by_a_separate_doer_is_recorded_by_the_host_that_decided(
    make_host, tmp_path
):
    host = make_host(config=agents(tmp_path, ci=Profile()), allow_all=True)
    request = ExecRequest(["sh", "-c", "cat; echo made > out.txt"], profile="ci", **FULL)
    admission = host.admit(attrs.evolve(request, stdin=b"from stdin\n"))
    text = step_to_json(admission.step)
    # The doer sees only the step's text: no policy, no record, no host.
    doer = Doer(host.config, sandboxes=host.sandboxes, executors=host.executors, run_id="r-worker")
    try:
        step = step_from_json(text, AdmittedStep)
        assert step == admission.step
        carried = doer.carry_out(doer.prepare(step, admission.secrets))
    finally:
        doer.close()
    back = step_from_json(step_to_json(carried), Carried)
    assert back == carried
    result = host.recording.result(back)
    assert (result.exit_code, result.stdout.text) == (0, "from stdin\n")
    assert result.changes is not None and result.changes.created == ("out.txt",)
    assert (tmp_path.with_name(tmp_path.name + "-state") / "store.db").exists()
    assert verify(host.store).ok
    kinds = [row.kind for row in rows(host.store)]
    assert kinds == ["action", "permission", "result"]


def test_one_profile_lookup_and_one_workspace_check_per_request(make_host, tmp_path, monkeypatch):
    import stockade.policy.resolve
    import stockade.workspace.folders

    host = make_host(config=agents(tmp_path, ci=Profile(quota_mb=50)), allow_all=True)
    calls = {"profile": 0, "has_own": 0}
    profile, has_own = Config.profile, stockade.workspace.folders.has_own

    def counted_profile(self, name):
        calls["profile"] += 1
        return profile(self, name)

    def counted_has_own(config, name):
        calls["has_own"] += 1
        return has_own(config, name)

    monkeypatch.setattr(Config, "profile", counted_profile)
    for module in (stockade.workspace.folders, stockade.policy.resolve):
        monkeypatch.setattr(module, "has_own", counted_has_own)
    # The control: the spies see a lookup outside the pipeline.
    assert host.config.profile("ci").quota_mb == 50 and calls["profile"] == 1
    calls["profile"] = 0
    result = host.run(ExecRequest(["sh", "-c", "echo x > f"], profile="ci", **FULL))
    assert result.exit_code == 0 and result.changes is not None  # watched: its own workspace
    assert calls == {"profile": 1, "has_own": 1}


def test_a_held_step_is_resumed_with_one_lookup_too(make_host, tmp_path, monkeypatch):
    config = agents(tmp_path, ci=Profile(ask=("writes",)))
    host = make_host(config=config)
    with pytest.raises(PolicyHeld):
        host.run(ExecRequest(["touch", "made"], profile="ci", **FULL))
    host.answer(host.run_id, 1, approve=True, by="tester")
    calls = {"profile": 0}
    profile = Config.profile

    def counted(self, name):
        calls["profile"] += 1
        return profile(self, name)

    monkeypatch.setattr(Config, "profile", counted)
    result = host.resume(host.run_id, 1)
    assert result.exit_code == 0 and result.decision.by == "tester"
    assert calls["profile"] == 1


def _step(stdin: bytes, argv: list[str], env: dict[str, str], hosts: list[str]) -> AdmittedStep:
    from stockade.policy.resolve import resolve

    spec = resolve(ExecRequest(["true"], **FULL), Config(), os.environ)
    spec = attrs.evolve(spec, argv=("true", *argv), stdin=stdin, env={**spec.env, **env})
    return AdmittedStep(
        spec,
        Classification("network", ("a reason",), by=("builtin",), programs=("true",)),
        Decision("allow", "allowed", by="tester"),
        Agent(Profile(name="ci", hosts=tuple(hosts), quota_mb=5), own_workspace=True),
        egress=EgressRule(tuple(hosts), resolve={"a.test": "127.0.0.1"}) if hosts else None,
    )


NAMES = st.text(st.characters(whitelist_categories=("Lu", "Ll")), min_size=1, max_size=8)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(
    stdin=st.binary(max_size=64),
    argv=st.lists(st.text(max_size=12).filter(lambda a: "\0" not in a), max_size=4),
    env=st.dictionaries(NAMES, st.text(max_size=8).filter(lambda v: "\0" not in v), max_size=3),
    hosts=st.lists(st.sampled_from(["a.test", "*.b.test", "c.test:8443"]), max_size=3),
)
def test_an_admitted_step_survives_its_wire_form_byte_for_byte(stdin, argv, env, hosts):
    step = _step(stdin, argv, env, hosts)
    assert step_from_json(step_to_json(step), AdmittedStep) == step


def test_a_step_of_another_version_or_shape_is_refused_with_what_to_do():
    data = json.loads(step_to_json(_step(b"", [], {}, [])))
    with pytest.raises(UsageError, match="version 2; this Stockade reads version 1") as caught:
        step_from_json(json.dumps({**data, "version": 2}), AdmittedStep)
    assert "same Stockade version" in (caught.value.hint or "")
    with pytest.raises(UsageError, match=r"malformed AdmittedStep: .*agent"):
        step_from_json(json.dumps({k: v for k, v in data.items() if k != "agent"}), AdmittedStep)
    with pytest.raises(UsageError, match="malformed AdmittedStep"):
        step_from_json(json.dumps({**data, "spec": {**data["spec"], "stdin": "%%"}}), AdmittedStep)
    with pytest.raises(UsageError, match="not valid JSON"):
        step_from_json("{", AdmittedStep)
