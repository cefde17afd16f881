"""The host pipeline: classification votes, decisions, approval, credentials, recording."""

from __future__ import annotations

import hashlib

import pytest

from stockade import hookimpl
from stockade.config.schema import Config, PluginsConfig
from stockade.errors import (
    CredentialUnavailable,
    PolicyDenied,
    PolicyHeld,
    RecorderFailed,
    SandboxUnavailable,
    UsageError,
)
from stockade.request.result import PendingApproval
from stockade.request.spec import ExecRequest
from stockade.request.verdict import Classification, Decision

UNCONFINED = {"mode": "danger-full-access"}


def test_builtin_policy_follows_the_default_profile(make_host, event_log, tmp_path):
    host = make_host(plugins=[event_log])
    canary = tmp_path / "canary"
    first = host.run(ExecRequest(["true"], origin="cli", **UNCONFINED))
    assert (first.decision.by, first.decision.reason) == (
        "builtin-policy",
        "reads is not in agents.default.ask",
    )
    assert host.run(ExecRequest(["touch", str(canary)], origin="api", **UNCONFINED)).exit_code == 0
    for origin in ("api", "mcp"):
        with pytest.raises(PolicyHeld, match="destroys always waits for a person") as caught:
            host.run(ExecRequest(["rm", str(canary)], origin=origin, **UNCONFINED))
        assert caught.value.exit_status == 126
    assert canary.exists()
    permissions = [e for e in event_log.events if e.kind == "permission"]
    assert [p.decision.verdict for p in permissions] == ["allow", "allow", "ask", "ask"]
    assert (
        event_log.kinds(skip={"taint"})
        == ["action", "permission", "result"] * 2 + ["action", "permission"] * 2
    )


def test_confined_mode_without_provider_never_runs_unconfined(make_host, tmp_path):
    host = make_host(allow_all=True)
    canary = tmp_path / "canary"
    for mode in ("read-only", "workspace-write", None):
        with pytest.raises(SandboxUnavailable) as caught:
            host.run(ExecRequest(["touch", str(canary)], mode=mode))
        assert caught.value.exit_status == 125
    assert not canary.exists()


def test_unclassified_counts_as_writes_and_most_severe_vote_wins(make_host):
    class Voter:
        def __init__(self, kind, name):
            self.kind, self.name = kind, name

        @hookimpl
        def stockade_classify(self, spec):
            return Classification(self.kind, (f"{self.name} says {self.kind}",), by=(self.name,))

    class Abstain:
        @hookimpl
        def stockade_classify(self, spec):
            return None

    alone = Config(plugins=PluginsConfig(disable=("stockade.builtin.classify",)))
    plain = make_host(allow_all=True, config=alone).run(ExecRequest(["true"], **UNCONFINED))
    assert plain.classification.kind == "writes"
    host = make_host(
        plugins=[Voter("reads", "a"), Abstain(), Voter("network", "b"), Voter("writes", "c")],
        allow_all=True,
        config=alone,
    )
    result = host.run(ExecRequest(["true"], **UNCONFINED))
    assert result.classification.kind == "network"
    assert set(result.classification.reasons) == {"a says reads", "b says network", "c says writes"}
    assert set(result.classification.by) == {"a", "b", "c"}


class _Asks:
    @hookimpl
    def stockade_decide(self, spec, classification, profile):
        return Decision("ask", "touches files", by="asks")


def test_ask_without_approver_is_held_and_does_not_run(make_host, tmp_path, event_log):
    canary = tmp_path / "canary"
    host = make_host(plugins=[_Asks(), event_log])
    with pytest.raises(PolicyHeld) as caught:
        host.run(ExecRequest(["touch", str(canary)], **UNCONFINED))
    assert caught.value.exit_status == 126
    assert not canary.exists()
    assert event_log.events[-1].decision.verdict == "ask"


def test_ask_is_answered_by_an_approver_or_preapproved(make_host, tmp_path):
    seen: list[PendingApproval] = []

    class Person:
        def __init__(self, verdict):
            self.verdict = verdict

        @hookimpl
        def stockade_ask(self, pending):
            seen.append(pending)
            return Decision(self.verdict, "a person said so", by="person")

    yes = make_host(plugins=[_Asks(), Person("allow")])
    assert yes.run(ExecRequest(["true"], **UNCONFINED)).decision.by == "person"
    assert seen[0].spec.argv == ("true",)
    assert seen[0].decision.reason == "touches files"
    no = make_host(plugins=[_Asks(), Person("deny")])
    with pytest.raises(PolicyDenied, match="a person said so"):
        no.run(ExecRequest(["true"], **UNCONFINED))
    pre = make_host(plugins=[_Asks()]).run(ExecRequest(["true"], preapproved=True, **UNCONFINED))
    assert pre.decision.by == "preapproved"


def test_credentials_reach_the_child_and_are_redacted(make_host):
    class Broker:
        @hookimpl
        def stockade_resolve_credential(self, handle, spec):
            return "s3cr3t-value" if handle == "vault:deploy" else None

    host = make_host(plugins=[Broker()], allow_all=True)
    request = ExecRequest(
        ["sh", "-c", 'printf "%s" "$DEPLOY"'], credentials={"DEPLOY": "vault:deploy"}, **UNCONFINED
    )
    admitted = host.prepare(host.admit(request))
    assert "DEPLOY" not in admitted.spec.env
    assert admitted.plan.env["DEPLOY"] == "s3cr3t-value"
    result = host.run(request)
    assert result.stdout.text == "[redacted]"
    # The digest and size describe the stream as kept: a digest of the secret is not kept.
    assert result.stdout.total_bytes == len("[redacted]")
    assert result.stdout.sha256 == hashlib.sha256(b"[redacted]").hexdigest()
    with pytest.raises(CredentialUnavailable, match="'vault:other'"):
        host.run(ExecRequest(["true"], credentials={"X": "vault:other"}, **UNCONFINED))


def test_a_dying_recorder_stops_the_run_before_and_keeps_the_result_after(make_host, tmp_path):
    canary = tmp_path / "canary"

    class Dies:
        def __init__(self, on):
            self.on = on

        @hookimpl
        def stockade_record(self, event):
            if event.kind == self.on:
                raise OSError("disk full")

    before = make_host(plugins=[Dies("action")], allow_all=True)
    with pytest.raises(RecorderFailed, match="was not run: disk full"):
        before.run(ExecRequest(["touch", str(canary)], **UNCONFINED))
    assert not canary.exists()
    after = make_host(plugins=[Dies("result")], allow_all=True)
    with pytest.raises(RecorderFailed) as caught:
        after.run(ExecRequest(["touch", str(canary)], **UNCONFINED))
    assert canary.exists()
    assert caught.value.result.exit_code == 0


def test_timeout_default_cap_and_validation(make_host):
    host = make_host(allow_all=True)
    assert host.admit(ExecRequest(["true"], **UNCONFINED)).spec.timeout == 30.0
    assert host.admit(ExecRequest(["true"], timeout=10_000, **UNCONFINED)).spec.timeout == 600.0
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(UsageError, match="timeout"):
            host.admit(ExecRequest(["true"], timeout=bad, **UNCONFINED))


def test_request_validation_is_clear():
    with pytest.raises(TypeError, match="not one string"):
        ExecRequest("rm -rf /")
    with pytest.raises(ValueError, match="argv is empty"):
        ExecRequest([])
    with pytest.raises(ValueError, match="NUL"):
        ExecRequest(["echo", "a\0b"])
    with pytest.raises(ValueError, match="mode must be one of"):
        ExecRequest(["true"], mode="yolo")
