"""The hooks reference tells the truth: a section for every hook spec, in their order, with
its real signature and calling convention; and the hook examples on that page run.

The examples are included from docs/examples/ with pymdownx.snippets, so these tests exercise
exactly the code the page shows."""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Callable

import attrs
import pytest

from helpers.docs import DOCS, FULL_ACCESS, example
from stockade import hookimpl
from stockade.errors import PluginError, PolicyDenied, PolicyHeld, StockadeError, UsageError
from stockade.plugin import hookspecs
from stockade.policy.resolve import resolve
from stockade.request.result import PendingApproval
from stockade.request.spec import ExecRequest
from stockade.request.verdict import Classification

HOOKS_PAGE = DOCS / "reference" / "hooks.md"


# --- the hooks reference -------------------------------------------------------------------


def hook_specs() -> dict[str, Callable[..., object]]:
    """Every ``stockade_*`` hook spec, in source order."""
    found = [
        (func.__code__.co_firstlineno, name, func)
        for name, func in inspect.getmembers(hookspecs, inspect.isfunction)
        if name.startswith("stockade_") and hasattr(func, "stockade_spec")
    ]
    return {name: func for _, name, func in sorted(found)}


def hook_sections() -> dict[str, str]:
    """The ``## heading`` sections of the hooks page: heading -> body."""
    text = HOOKS_PAGE.read_text(encoding="utf-8")
    parts = re.split(r"^## +(.+?) *$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_hook_spec_has_a_section() -> None:
    missing = [name for name in hook_specs() if name not in hook_sections()]
    assert not missing, f"docs/reference/hooks.md lacks '## <name>' sections for {missing}"


def test_no_section_names_a_hook_that_does_not_exist() -> None:
    specs = hook_specs()
    unknown = [heading for heading in hook_sections() if heading not in specs]
    assert not unknown, f"docs/reference/hooks.md has sections for unknown hooks {unknown}"


def test_no_hook_mentioned_on_the_hooks_page_is_unknown() -> None:
    mentioned = set(re.findall(r"\bstockade_[a-z_]+\b", HOOKS_PAGE.read_text(encoding="utf-8")))
    # stockade_spec / stockade_impl are pluggy's attribute names, not hooks.
    assert mentioned - {"stockade_spec", "stockade_impl"} <= set(hook_specs())


def test_hook_sections_follow_the_order_of_hookspecs() -> None:
    assert list(hook_sections()) == list(hook_specs())


@pytest.mark.parametrize("name", list(hook_specs()))
def test_hook_section_shows_the_real_signature(name: str) -> None:
    sig = inspect.signature(hook_specs()[name])
    params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
    expected = f"def {name}({params}) -> {sig.return_annotation}"
    assert expected in hook_sections()[name]


@pytest.mark.parametrize("name", list(hook_specs()))
def test_hook_section_states_the_calling_convention(name: str) -> None:
    lines = [
        line for line in hook_sections()[name].splitlines() if line.startswith("**Convention:**")
    ]
    assert len(lines) == 1, f"{name}: one '**Convention:**' line expected"
    firstresult = hook_specs()[name].stockade_spec["firstresult"]  # type: ignore[attr-defined]
    assert ("firstresult" in lines[0]) == firstresult


# --- the hook examples --------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "outcome"), [(True, "ran"), (False, "denied"), (None, "held")])
def test_callback_approver(make_host, tmp_path, answer, outcome):
    asked: list[PendingApproval] = []

    def ask_person(pending: PendingApproval) -> bool | None:
        asked.append(pending)
        return answer

    approver = example("hooks_examples").CallbackApprover(ask_person)
    host = make_host(plugins=[example("example_plugin"), approver])
    request = ExecRequest(["touch", "new"], str(tmp_path), mode=FULL_ACCESS)
    if outcome == "ran":
        assert host.run(request).decision.by == "person"
    else:
        with pytest.raises(PolicyDenied if outcome == "denied" else PolicyHeld):
            host.run(request)
    assert (tmp_path / "new").exists() == (outcome == "ran")
    assert [p.spec.argv for p in asked] == [("touch", "new")]


def classification_of(host, *argv: str) -> Classification:
    """How ``host`` classifies ``argv`` (resolved as ``true``, so any argv is judged)."""
    spec = resolve(ExecRequest(["true"], mode=FULL_ACCESS), host.config, os.environ)
    return host.classify(attrs.evolve(spec, argv=argv))


def test_systemctl_rules(make_host):
    host = make_host(plugins=[example("hooks_examples").SystemctlRules()])
    assert classification_of(host, "systemctl", "status", "nginx").kind == "reads"
    assert classification_of(host, "systemctl").kind == "reads"  # lists the units
    assert classification_of(host, "env", "systemctl", "stop", "nginx").kind == "destroys"
    assert classification_of(host, "systemctl", "-H", "db1", "status").kind == "network"
    # A shell's script is read by its parts, and the rule classes the part; one not read asks.
    assert classification_of(host, "sh", "-c", "systemctl status").kind == "reads"
    assert classification_of(host, "sh", "-c", "systemctl status $UNIT").kind == "destroys"
    without = make_host()
    assert classification_of(without, "systemctl", "status").kind == "writes"  # unknown


def test_two_plugins_cannot_rule_on_one_program(make_host):
    rules = example("hooks_examples").SystemctlRules
    with pytest.raises(PluginError, match="both add a classifier rule for 'systemctl'"):
        make_host(plugins=[rules(), rules()])


def test_file_broker_injects_and_redacts(make_host, tmp_path):
    secret = tmp_path / "token"
    secret.write_text("s3cr3t-value\nignored\n")
    broker = example("hooks_examples").FileBroker()
    host = make_host(plugins=[broker])
    request = ExecRequest(
        ["printenv", "API_TOKEN"],
        str(tmp_path),
        mode=FULL_ACCESS,
        origin="cli",
        credentials={"API_TOKEN": f"file:{secret}"},
    )
    result = host.run(request)
    assert result.ok
    assert result.stdout.text == "[redacted]\n"
    other = attrs.evolve(request, credentials={"API_TOKEN": "vault:x"})
    with pytest.raises(StockadeError, match="no credential broker resolved 'vault:x'"):
        host.run(other)


def test_json_lines_recorder(make_host, tmp_path):
    log = tmp_path / "events.jsonl"
    recorder = example("hooks_examples").JsonLinesRecorder(str(log))
    host = make_host(plugins=[recorder])
    result = host.run(ExecRequest(["echo", "hi"], str(tmp_path), mode=FULL_ACCESS, origin="cli"))
    events = [json.loads(line) for line in log.read_text().splitlines()]
    events = [e for e in events if e["kind"] != "taint"]  # the breaker's, after the result
    assert [e["kind"] for e in events] == ["action", "permission", "result"]
    assert {e["action_id"] for e in events} == {result.action_id}
    assert events[2]["result"]["stdout"]["text"] == "hi\n"


def test_json_lines_batch_recorder_writes_what_belongs_together_at_once(make_host, tmp_path):
    log = tmp_path / "events.jsonl"
    writes = []

    class Counted(example("hooks_examples").JsonLinesBatchRecorder):
        @hookimpl
        def stockade_record_batch(self, events):
            writes.append(len(events))
            super().stockade_record_batch(events)

    host = make_host(plugins=[Counted(str(log))])
    host.run(ExecRequest(["true"], str(tmp_path), mode=FULL_ACCESS, origin="cli"))
    kinds = [json.loads(line)["kind"] for line in log.read_text().splitlines()]
    assert kinds == ["action", "permission", "result"]
    assert writes == [2, 1]  # the action with its decision, then the result


def test_frontend_plugin_offers_a_command(make_host, tmp_path, capsys):
    import argparse

    from stockade.cli import HANDLERS
    from stockade.frontends import CliContext

    plugin = example("frontend_plugin")
    host = make_host(plugins=[plugin])
    command = host.hooks.cli_commands(HANDLERS)["count"]
    cli = CliContext(None, {}, host.config, host.hooks)
    parser = argparse.ArgumentParser(prog="stockade count")
    command.arguments(parser, cli)
    (tmp_path / "notes.txt").write_text("one\ntwo\n")
    args = parser.parse_args([str(tmp_path / "notes.txt"), "--json"])
    assert command.handler(args, cli) == 0
    assert json.loads(capsys.readouterr().out) == {"lines": 2, "bytes": 8}
    with pytest.raises(UsageError, match="cannot read"):
        command.handler(parser.parse_args([str(tmp_path / "none")]), cli)


def test_frontend_plugin_offers_an_mcp_tool(make_host, tmp_path):
    from stockade.frontends import McpSession
    from stockade.run.executor import AbortToken

    host = make_host(plugins=[example("frontend_plugin")])
    tool = host.hooks.mcp_tools()["count_lines"]
    (tmp_path / "notes.txt").write_text("one\ntwo\n")
    root = os.path.realpath(tmp_path)
    plain = McpSession(host, "default", root, {"--count-bytes": False})
    counting = McpSession(host, "default", root, {"--count-bytes": True})
    assert tool.call(plain, {"path": "notes.txt"}, AbortToken()).structured == {"lines": 2}
    out = tool.call(counting, {"path": "notes.txt"}, AbortToken())
    assert (out.text, out.structured) == ("2 lines", {"lines": 2, "bytes": 8})
    with pytest.raises(UsageError, match="outside the workspace"):
        tool.call(plain, {"path": "../etc/passwd"}, AbortToken())
    assert [s.flag for s in tool.switches] == ["--count-bytes"]
