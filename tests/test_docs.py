"""The documentation tells the truth: hook sections match the specs, examples run.

Every code example in docs/ is included from docs/examples/ (or from this file) with
pymdownx.snippets, so the tests below exercise exactly the code the pages show.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import inspect
import json
import os
import re
import signal
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import ClassVar

import attrs
import pytest
from stockade_bubblewrap import layout
from stockade_bubblewrap.settings import Settings
from stockade_landlock import provider as landlock_provider
from stockade_landlock.settings import Settings as LandlockSettings

from stockade import hookimpl
from stockade.cli import main
from stockade.config.load import parse_config
from stockade.config.schema import Config, OutputConfig, PluginsConfig
from stockade.confine import protected, seccomp, stores
from stockade.confine.provider import DENIAL_SIGNATURES, SandboxProvider
from stockade.errors import (
    PluginError,
    PolicyDenied,
    PolicyHeld,
    SandboxUnavailable,
    StockadeError,
    UsageError,
)
from stockade.plugin import hookspecs
from stockade.policy import rules as policy
from stockade.policy.resolve import resolve
from stockade.record.store import store_path
from stockade.request.plan import LaunchPlan, SandboxFacts
from stockade.request.result import PendingApproval, ProcessOutcome
from stockade.request.spec import Budget, ExecRequest, ExecSpec, Limits, Profile
from stockade.request.verdict import Classification
from stockade.testing import EventLog

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
HOOKS_PAGE = DOCS / "reference" / "hooks.md"
FULL_ACCESS = "danger-full-access"


@cache
def example(name: str) -> ModuleType:
    """Import docs/examples/<name>.py once, as the module ``<name>``."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


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


# --- the example plugin (classifier and policy) --------------------------------------------


class DestroysEverything:
    """A classifier that votes ``destroys`` for every command."""

    @hookimpl
    def stockade_classify(self, spec: ExecSpec) -> Classification:
        return Classification("destroys", ("the test says so",), by=("test",))


# --8<-- [start:plugin-test]
def test_example_plugin_allows_what_only_reads(make_host, event_log, tmp_path):
    plugin = example("example_plugin")
    (tmp_path / "notes.txt").write_text("hello\n")
    host = make_host(plugins=[plugin, event_log])

    result = host.run(ExecRequest(["ls"], str(tmp_path), mode="danger-full-access"))

    assert result.ok
    assert result.stdout.text == "notes.txt\n"
    assert result.classification.kind == "reads"
    assert result.decision.by == "example"
    assert event_log.kinds(skip={"taint"}) == ["action", "permission", "result"]


def test_example_plugin_holds_what_writes(make_host, event_log, tmp_path):
    host = make_host(plugins=[example("example_plugin"), event_log])

    with pytest.raises(PolicyHeld):  # no approver is installed to ask a person
        host.run(ExecRequest(["touch", "new"], str(tmp_path), mode="danger-full-access"))

    assert not (tmp_path / "new").exists()
    assert event_log.kinds() == ["action", "permission"]


# --8<-- [end:plugin-test]


def test_example_plugin_runs_preapproved_commands(make_host, tmp_path):
    host = make_host(plugins=[example("example_plugin")])
    request = ExecRequest(["touch", "new"], str(tmp_path), mode=FULL_ACCESS, preapproved=True)
    result = host.run(request)
    assert result.ok
    assert result.decision.by == "preapproved"
    assert (tmp_path / "new").exists()


def test_example_plugin_denies_what_destroys(make_host, tmp_path):
    host = make_host(plugins=[example("example_plugin"), DestroysEverything()])
    with pytest.raises(PolicyDenied) as caught:
        host.run(ExecRequest(["ls"], str(tmp_path), mode=FULL_ACCESS, preapproved=True))
    assert caught.value.exit_status == 126
    assert "never run" in caught.value.message


def test_example_classifier_does_not_trust_a_local_ls(make_host, tmp_path):
    fake = tmp_path / "ls"
    fake.write_text("#!/bin/sh\ntouch pwned\n")
    fake.chmod(0o755)
    host = make_host(plugins=[example("example_plugin")])
    with pytest.raises(PolicyHeld):
        host.run(ExecRequest(["./ls"], str(tmp_path), mode=FULL_ACCESS))
    assert not (tmp_path / "pwned").exists()


# --- the example backends -----------------------------------------------------------------


def backends_host(make_host, **config: object):
    return make_host(plugins=[example("example_backends")], config=Config(**config))


def test_dry_run_executor_reports_the_nice_launch_plan(make_host, tmp_path):
    host = backends_host(make_host, executor="dry-run", sandbox="nice")
    result = host.run(ExecRequest(["echo", "hi"], str(tmp_path), mode=FULL_ACCESS, origin="cli"))
    assert result.ok
    program = result.stdout.text.split()[3]
    assert result.stdout.text == f"nice -n 10 {program} hi\n"
    assert os.path.basename(program) == "echo"
    assert result.sandbox.provider == "nice"


def test_dry_run_executor_gets_run_async_for_free(make_host, tmp_path):
    host = backends_host(make_host, executor="dry-run")
    request = ExecRequest(["true"], str(tmp_path), mode=FULL_ACCESS, origin="cli")
    result = asyncio.run(host.run_async(request))
    assert result.stdout.text == "true\n"  # the unconfined plan runs the argv as it is


def test_nice_provider_runs_for_real_with_its_settings(make_host, tmp_path):
    plugins = PluginsConfig(settings={"nice": {"niceness": 5}})
    host = backends_host(make_host, sandbox="nice", plugins=plugins)
    result = host.run(ExecRequest(["nice"], str(tmp_path), mode=FULL_ACCESS, origin="cli"))
    assert result.ok
    assert int(result.stdout.text) == min(19, os.nice(0) + 5)


def test_nice_provider_is_never_used_for_a_confined_mode(make_host, tmp_path):
    host = backends_host(make_host, sandbox="nice")
    with pytest.raises(SandboxUnavailable):
        host.run(ExecRequest(["true"], str(tmp_path), mode="read-only", origin="cli"))
    auto = backends_host(make_host)  # auto does not pick it either: it runs under another
    result = auto.run(ExecRequest(["true"], str(tmp_path), mode="workspace-write", origin="cli"))
    assert result.sandbox.provider not in ("nice", "none")
    assert result.sandbox.enforcement == "full"


def test_nice_provider_probe_fails_closed_without_nice(monkeypatch):
    backends = example("example_backends")
    monkeypatch.setattr(backends.shutil, "which", lambda _name: None)
    assert not backends.NiceProvider.probe().usable


def test_a_second_provider_of_the_same_name_is_an_error(make_host):
    backends = example("example_backends")

    class Impostor(backends.NiceProvider):
        pass

    class Registers:
        @hookimpl
        def stockade_register_sandboxes(self, register):
            register(Impostor)

    with pytest.raises(PluginError, match="two sandbox providers are named 'nice'"):
        make_host(plugins=[backends, Registers()])


def test_blocking_the_local_executor_leaves_a_clear_error(make_host):
    host = make_host(environ={**os.environ, "STOCKADE_DISABLE_PLUGINS": "local"})
    with pytest.raises(PluginError, match="unknown executor 'local'; installed: none"):
        host.run(ExecRequest(["true"], mode=FULL_ACCESS, origin="cli"))


# --- after the run: interpret and release, as plugins.md describes them -------------------

NiceProvider = example("example_backends").NiceProvider


# --8<-- [start:interpret]
class NiceWithFacts(NiceProvider):
    """``nice``, plus what only the finished run can show."""

    def interpret(self, plan: LaunchPlan, outcome: ProcessOutcome) -> SandboxFacts:
        """``runner_failed`` when nice itself failed: status 125 and nice's own message."""
        if outcome.exit_code == 125 and outcome.stderr.text.startswith("nice: "):
            return attrs.evolve(plan.facts, runner_failed=True)
        return plan.facts


# --8<-- [end:interpret]


def registering(cls: type[SandboxProvider]) -> object:
    """A plugin object that registers ``cls`` alone."""

    class Registers:
        @hookimpl
        def stockade_register_sandboxes(self, register):
            register(cls)

    return Registers()


def test_interpret_sets_the_facts_of_the_result(make_host, tmp_path):
    host = make_host(plugins=[registering(NiceWithFacts)], config=Config(sandbox="nice"))

    def facts(script: str) -> SandboxFacts:
        request = ExecRequest(
            ["sh", "-c", script], str(tmp_path), mode=FULL_ACCESS, origin="cli", preapproved=True
        )
        return host.run(request).sandbox

    assert facts("true") == SandboxFacts("nice", FULL_ACCESS)
    assert not facts("exit 125").runner_failed
    # Read from the command's own stderr: a hint, which the command can fake.
    assert facts("echo 'nice: failed' >&2; exit 125").runner_failed


class NiceWithDescriptor(NiceProvider):
    """``nice`` with a pipe passed to the command; the default ``release`` must close it."""

    opened: ClassVar[list[tuple[int, int]]] = []

    def confine(self, spec: ExecSpec) -> LaunchPlan:
        reader, writer = os.pipe()
        os.close(writer)
        self.opened.append((reader, os.fstat(reader).st_ino))
        return attrs.evolve(super().confine(spec), pass_fds=(reader,))


def still_open(fd: int, inode: int) -> bool:
    try:
        return os.fstat(fd).st_ino == inode
    except OSError:
        return False


@pytest.mark.parametrize("memory_mb", [None, 64], ids=["ran", "executor-refused"])
def test_release_closes_the_plans_descriptors(make_host, tmp_path, memory_mb, monkeypatch):
    from stockade_local import limits

    monkeypatch.setattr(limits, "PRLIMIT_PATHS", ("/nonexistent/prlimit",))  # limits refused
    NiceWithDescriptor.opened.clear()
    host = make_host(plugins=[registering(NiceWithDescriptor)], config=Config(sandbox="nice"))
    request = ExecRequest(
        ["true"], str(tmp_path), mode=FULL_ACCESS, origin="cli", memory_mb=memory_mb
    )
    if memory_mb is None:
        assert host.run(request).ok
    else:
        with pytest.raises(StockadeError):  # no prlimit: the executor refuses limits
            host.run(request)
    [(fd, inode)] = NiceWithDescriptor.opened
    assert not still_open(fd, inode)


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


# --- configuration ------------------------------------------------------------------------


def test_config_example_lists_the_defaults():
    config = parse_config((EXAMPLES / "config.toml").read_bytes())
    assert attrs.evolve(config, source=None) == Config()


# Keys of work in progress (the recorder and the credential broker), documented when it lands.
# Remove a name here once its row is written.
KEYS_NOT_DOCUMENTED_YET: frozenset[str] = frozenset()


def test_every_config_key_has_a_row():
    rows = table_keys(section(DOCS / "configuration.md", "## Every key"))
    missing = []
    for field in attrs.fields(attrs.resolve_types(Config)):
        if field.name == "source":  # not a key in the file
            continue
        if attrs.has(field.type):  # a table: a row for each of its keys
            table = attrs.resolve_types(field.type)
            names = [f"{field.name}.{sub.name}" for sub in attrs.fields(table)]
        else:  # agents: a row for agents.NAME
            names = [field.name]
        missing += [
            name
            for name in names
            if name not in KEYS_NOT_DOCUMENTED_YET
            and not any(row == name or row.startswith(name + ".") for row in rows)
        ]
    assert not missing, f"docs/configuration.md '## Every key' lacks rows for {missing}"


def test_config_error_names_the_key():
    with pytest.raises(StockadeError, match=r"unknown key 'timout' @ \$"):
        parse_config("timout = 3\n")


# --- the command line, as getting-started.md describes it ---------------------------------


@pytest.fixture
def cli(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("STOCKADE_CONFIG", raising=False)
    monkeypatch.delenv("STOCKADE_DISABLE_PLUGINS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)

    def run(*argv: str) -> tuple[int, str, str]:
        status = main(list(argv))
        out, err = capsys.readouterr()
        return status, out, err

    return run


@pytest.mark.parametrize(
    ("options", "argv", "status"),
    [
        ([], ["echo", "hello"], 0),
        ([], ["sh", "-c", "exit 3"], 3),
        ([], ["sh", "-c", "kill -TERM $$"], 128 + signal.SIGTERM),
        ([], ["no-such-program-here"], 127),
        (["--timeout", "0.2"], ["sleep", "5"], 124),
        (["--timeout", "0.2"], ["sh", "-c", "trap 'exit 0' TERM; sleep 5 & wait"], 124),
        (["--memory-mb", "64"], ["true"], 0),
        (["--memory-mb", "64"], ["python3", "-c", "b = bytearray(256 << 20)"], 1),
    ],
)
def test_cli_exit_status(cli, options, argv, status):
    # --yes: a shell, and python -c, count as destroys, which asks a person.
    assert cli("run", "--yes", "--mode", FULL_ACCESS, *options, "--", *argv)[0] == status


def test_cli_default_mode_fails_closed(cli, monkeypatch):
    monkeypatch.setenv("STOCKADE_DISABLE_PLUGINS", "bubblewrap,landlock")  # no sandbox provider
    status, out, err = cli("run", "--", "echo", "hello")
    assert status == 125
    assert out == ""
    assert "error[sandbox_unavailable]" in err


def test_cli_cannot_start_is_126(cli, tmp_path):
    script = tmp_path / "noshebang"
    script.write_bytes(b"\x7fELF not really")
    script.chmod(0o755)
    assert cli("run", "--mode", FULL_ACCESS, "--", "./noshebang")[0] == 126


def test_cli_json_result_keys(cli):
    status, out, _err = cli("run", "--json", "--mode", FULL_ACCESS, "--", "echo", "hello")
    assert status == 0
    result = json.loads(out)
    assert sorted(result) == sorted(
        [
            "action_id",
            "argv",
            "exit_code",
            "signal",
            "timed_out",
            "aborted",
            "duration_ms",
            "timeout_s",
            "stdout",
            "stderr",
            "sandbox",
            "classification",
            "decision",
            "limits",
            "limit_hit",
            "changes",
            "refused",
            "cwd",
            "quarantined",
            "restored",
            "landed",
            "conflicts",
        ]
    )
    assert sorted(result["limits"]) == ["cpu_seconds", "file_size_mb", "memory_mb", "processes"]
    assert sorted(result["stdout"]) == ["sha256", "spill_path", "text", "total_bytes", "truncated"]
    assert sorted(result["sandbox"]) == [
        "denied",
        "enforcement",
        "hidden",
        "missing",
        "mode",
        "protection",
        "provider",
        "runner_failed",
        "stale",
        "writes",
    ]


def test_cli_json_error_keys(cli, monkeypatch):
    monkeypatch.setenv("STOCKADE_DISABLE_PLUGINS", "bubblewrap,landlock")  # no sandbox provider
    status, out, _err = cli("run", "--json", "--", "echo", "hello")
    assert status == 125
    assert sorted(json.loads(out)["error"]) == ["code", "details", "hint", "message"]


# --- the local executor, as local-executor.md describes it --------------------------------


def test_a_trapped_timeout_keeps_both_facts(make_host, tmp_path):
    host = make_host(allow_all=True)
    script = "trap 'exit 0' TERM; sleep 5 & wait"
    result = host.run(
        ExecRequest(["sh", "-c", script], str(tmp_path), mode=FULL_ACCESS, timeout=0.3)
    )
    assert (result.timed_out, result.exit_code, result.signal) == (True, 0, None)
    assert not result.ok


def test_truncated_output_keeps_head_tail_and_a_private_spill_file(make_host, tmp_path):
    spill_parent = tmp_path / "spill"
    spill_parent.mkdir()
    config = Config(
        output=OutputConfig(limit=100),
        plugins=PluginsConfig(settings={"local": {"spill_dir": str(spill_parent)}}),
    )
    host = make_host(allow_all=True, config=config)
    result = host.run(ExecRequest(["seq", "1", "1000"], str(tmp_path), mode=FULL_ACCESS))
    whole = "".join(f"{n}\n" for n in range(1, 1001)).encode()
    out = result.stdout
    assert out.truncated
    assert out.total_bytes == len(whole)
    assert out.sha256 == hashlib.sha256(whole).hexdigest()
    assert out.text.startswith(whole[:50].decode())
    assert out.text.endswith(whole[-50:].decode())
    assert "bytes omitted from the middle" in out.text
    assert out.spill_path is not None
    spill = Path(out.spill_path)
    assert spill.read_bytes() == whole
    assert spill.parent.parent == spill_parent
    assert spill.parent.stat().st_mode & 0o777 == 0o700
    assert spill.stat().st_mode & 0o777 == 0o600


# --- the bubblewrap and seccomp pages -----------------------------------------------------

BUBBLEWRAP_PAGE = DOCS / "bubblewrap.md"
SECCOMP_PAGE = DOCS / "seccomp.md"


def section(path: Path, heading: str) -> str:
    """The body of ``heading`` (a whole line, such as ``## Settings``) up to the next
    heading of the same or a higher level."""
    text = path.read_text(encoding="utf-8")
    level = len(heading) - len(heading.lstrip("#"))
    match = re.search(rf"^{re.escape(heading)} *\n(.*?)(?=^#{{1,{level}}} |\Z)", text, re.M | re.S)
    assert match, f"{path.name} has no {heading!r} section"
    return match.group(1)


def table_keys(body: str) -> list[str]:
    """The backticked names in the first column of the Markdown table rows in ``body``."""
    return re.findall(r"^\| `([^`]+)` \|", body, flags=re.M)


def bubblewrap_settings() -> list[str]:
    """The settings the bubblewrap provider accepts: the fields of its ``Settings``."""
    names = [field.name for field in attrs.fields(Settings)]
    assert len(names) >= 5, f"found only {names} in stockade_bubblewrap.settings.Settings"
    return names


def test_the_seccomp_page_lists_every_denied_syscall_with_its_reason():
    body = section(SECCOMP_PAGE, "### Denied system calls")
    rows = dict(re.findall(r"^\| `([a-z0-9_]+)` \| (.+?) \|$", body, flags=re.M))
    missing = [name for name in seccomp.DENIED if name not in rows]
    assert not missing, f"docs/seccomp.md lacks rows for {missing}"
    assert rows == seccomp.DENIED


def test_the_seccomp_page_lists_every_sysv_call_with_its_reason():
    body = section(SECCOMP_PAGE, "### System V IPC")
    rows = dict(re.findall(r"^\| `([a-z0-9_]+)` \| (.+?) \|$", body, flags=re.M))
    assert rows == seccomp.SYSV_IPC


@pytest.mark.parametrize(
    "name",
    [
        *seccomp.DENIED,
        *(reason.split(":")[0] for reason in seccomp.DENIED_IOCTLS.values()),
        *(f"{request:#06X}".replace("0X", "0x") for request in seccomp.DENIED_IOCTLS),
        *seccomp.CLONE_NAMESPACE_FLAGS,
        *seccomp.PERSONA_FLAGS,
        "clone3",
        "AF_NETLINK",
        "AF_UNIX",
        "AF_INET",
        "AF_INET6",
    ],
)
def test_the_seccomp_page_names_each_part_of_the_policy(name):
    assert f"`{name}`" in SECCOMP_PAGE.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("page", "heading"),
    [(BUBBLEWRAP_PAGE, "## Settings"), (DOCS / "configuration.md", "## The bubblewrap sandbox")],
    ids=["bubblewrap.md", "configuration.md"],
)
def test_every_bubblewrap_setting_has_a_row(page, heading):
    assert sorted(table_keys(section(page, heading))) == sorted(bubblewrap_settings())


@pytest.mark.parametrize(
    "name",
    [
        *stores.CREDENTIAL_STORES,
        *sorted(protected.AGENT_CONFIG),
        *sorted(protected.DOTFILES),
        *protected.RUN_LATER,
        *layout.PRIVATE_DIRS,
        *DENIAL_SIGNATURES,
        "SSH_AUTH_SOCK",
        "DBUS_SESSION_BUS_ADDRESS",
        "DOCKER_HOST",
    ],
)
def test_the_bubblewrap_page_names_what_the_layout_protects(name):
    assert f"`{name}`" in BUBBLEWRAP_PAGE.read_text(encoding="utf-8")


def test_the_bubblewrap_page_states_the_default_scan_limit():
    row = next(
        r for r in section(BUBBLEWRAP_PAGE, "## Settings").splitlines() if "`scan_limit`" in r
    )
    assert f"`{protected.DEFAULT_SCAN_LIMIT}`" in row


# The example in docs/bubblewrap.md, included from between the markers.
BUBBLEWRAP_TOML = """
# --8<-- [start:bubblewrap-toml]
[plugins.settings.bubblewrap]
writable_roots = ["/var/tmp/ccache"] # also writable in workspace-write, when it exists
deny_read = ["/etc/ssl/private"]    # also masked, in every mode
scan_limit = 50000                  # a large monorepo: walk up to 50,000 directories
seccomp_cache = ""                  # no disk cache: compile once per process (~22 ms)
unix_sockets = false                # socket(AF_UNIX) stays refused (the default)
layers = true                       # writes land through the host's checks (the default)
# --8<-- [end:bubblewrap-toml]
"""


def test_the_bubblewrap_config_example_sets_every_setting_and_runs(make_host, tmp_path):
    config = parse_config(BUBBLEWRAP_TOML)
    assert sorted(config.plugins.settings["bubblewrap"]) == sorted(bubblewrap_settings())
    host = make_host(allow_all=True, config=attrs.evolve(config, sandbox="bubblewrap"))
    result = host.run(ExecRequest(["touch", "made"], str(tmp_path), mode="workspace-write"))
    assert result.ok
    assert result.sandbox == SandboxFacts(
        "bubblewrap", "workspace-write", enforcement="full", writes="layered"
    )
    assert (tmp_path / "made").exists()


# --- the Landlock page --------------------------------------------------------------------

LANDLOCK_PAGE = DOCS / "landlock.md"
LIMITS_PAGE = DOCS / "limits.md"
SECURITY_TESTS = ROOT / "tests" / "security"
# @pytest.mark.gap("landlock", "why"), then any other decorators, then the test it pins.
GAP_MARKER = re.compile(
    r"""@pytest\.mark\.gap\(\s*"landlock"\s*,\s*"((?:[^"\\]|\\.)*)"\s*\)\s*\n"""
    r"(?:\s*@.*\n)*\s*def (test_\w+)"
)


def landlock_settings() -> list[str]:
    """The settings the Landlock provider accepts: the fields of its ``Settings``."""
    names = [field.name for field in attrs.fields(LandlockSettings)]
    assert len(names) >= 7, f"found only {names} in stockade_landlock.settings.Settings"
    return names


def landlock_gaps() -> dict[str, str]:
    """Every gap pinned for Landlock in tests/security/test_*.py: ``file.py::test`` -> why."""
    gaps: dict[str, str] = {}
    for path in sorted(SECURITY_TESTS.glob("test_*.py")):
        source = path.read_text(encoding="utf-8")
        for reason, test in GAP_MARKER.findall(source):
            gaps[f"{path.name}::{test}"] = reason
        # A marker the pattern missed (odd quoting, a reason built at run time) must not
        # slip past unnoticed.
        markers = len(re.findall(r"mark\.gap\(\s*\"landlock\"", source))
        assert markers == sum(1 for k in gaps if k.startswith(f"{path.name}::")), path.name
    assert gaps, "no gap markers found in tests/security: has the marker been renamed?"
    return gaps


@pytest.mark.parametrize(
    ("page", "heading"),
    [(LANDLOCK_PAGE, "## Settings"), (DOCS / "configuration.md", "## The landlock sandbox")],
    ids=["landlock.md", "configuration.md"],
)
def test_every_landlock_setting_has_a_row(page, heading):
    assert sorted(table_keys(section(page, heading))) == sorted(landlock_settings())


def test_the_landlock_page_states_the_default_scan_limit():
    row = next(r for r in section(LANDLOCK_PAGE, "## Settings").splitlines() if "`scan_limit`" in r)
    assert f"`{protected.DEFAULT_SCAN_LIMIT}`" in row


@pytest.mark.parametrize("entry", landlock_provider.missing_at(1))
def test_the_landlock_page_lists_each_missing_entry_verbatim(entry):
    assert f"`{entry}`" in section(LANDLOCK_PAGE, "## Partial enforcement")


def test_the_landlock_page_lists_exactly_the_pinned_gaps():
    body = section(LANDLOCK_PAGE, "## Known gaps")
    rows = dict(re.findall(r"^\| `([^`]+)` \| (.+?) \|$", body, flags=re.M))
    assert rows == landlock_gaps()


@pytest.mark.parametrize(
    "name",
    [
        *landlock_provider.PRIVATE_DIRS,
        *landlock_provider.DEVICES,
        "TMPDIR",
        "XDG_CACHE_HOME",
        "SSH_AUTH_SOCK",
        "DBUS_SESSION_BUS_ADDRESS",
        "DOCKER_HOST",
    ],
)
def test_the_landlock_page_names_what_it_masks_and_grants(name):
    assert f"`{name}`" in LANDLOCK_PAGE.read_text(encoding="utf-8")


def test_the_landlock_page_states_the_priority():
    text = LANDLOCK_PAGE.read_text(encoding="utf-8")
    assert f"`PRIORITY = {landlock_provider.LandlockSandbox.PRIORITY}`" in text


# The example in docs/landlock.md, included from between the markers.
LANDLOCK_TOML = """
# --8<-- [start:landlock-toml]
[plugins.settings.landlock]
writable_roots = ["/var/tmp/ccache"] # also writable in workspace-write, when it exists
deny_read = ["/etc/ssl/private"]    # also masked, in every mode
scan_limit = 50000                  # a large monorepo: walk up to 50,000 directories
seccomp_cache = ""                  # no disk cache: compile once per process
unix_sockets = false                # socket(AF_UNIX) stays refused (the default)
accept_partial = false              # refuse an ABI that cannot enforce everything (the default)
max_abi = 6                         # behave as on a kernel with ABI 6, the first that has it all
snapshot_limit_mb = 256             # a .git (less its objects) of up to 256 MiB is kept
supervise = true                    # protected paths read-only while a command runs (the default)
# --8<-- [end:landlock-toml]
"""


def test_the_landlock_config_example_sets_every_setting_and_runs(make_host, tmp_path):
    config = parse_config(LANDLOCK_TOML)
    options = config.plugins.settings["landlock"]
    assert sorted(options) == sorted(landlock_settings())
    assert LandlockSettings.parse(options).max_abi == 6
    probe = landlock_provider.LandlockSandbox.probe()
    if not probe.usable or "partial" in probe.detail:
        pytest.skip(f"Landlock cannot enforce everything here: {probe.detail}")
    host = make_host(allow_all=True, config=attrs.evolve(config, sandbox="landlock"))
    result = host.run(ExecRequest(["touch", "made"], str(tmp_path), mode="workspace-write"))
    assert result.ok
    expected = SandboxFacts(
        "landlock", "workspace-write", enforcement="full", protection="read-only"
    )
    assert result.sandbox == expected
    assert (tmp_path / "made").exists()


# --- the resource limits page --------------------------------------------------------------


@pytest.mark.parametrize("name", [field.name for field in attrs.fields(Limits)])
def test_the_limits_page_names_every_limit(name):
    assert f"| `{name}` |" in section(LIMITS_PAGE, "## The four limits")
    assert f"| `limits.{name}` |" in section(DOCS / "configuration.md", "## Every key")


@pytest.mark.parametrize("name", ["memory", "processes", "file_size", "cpu"])
def test_the_limits_page_names_every_limit_hit(name):
    assert f"`{name}`" in section(LIMITS_PAGE, "## What the result says")


# The example in docs/limits.md and docs/configuration.md, included from between the markers.
LIMITS_TOML = """
# --8<-- [start:limits-toml]
[limits]
memory_mb = 2048       # RLIMIT_AS: address space per process, in MiB
processes = 256        # RLIMIT_NPROC (a pids cgroup for a root host)
file_size_mb = 1024    # RLIMIT_FSIZE: the largest file written, in MiB
cpu_seconds = 600      # RLIMIT_CPU: CPU time per process, in seconds
# --8<-- [end:limits-toml]
"""


def test_the_limits_config_example_sets_every_limit_and_runs(make_host, tmp_path):
    config = parse_config(LIMITS_TOML)
    expected = Limits(memory_mb=2048, processes=256, file_size_mb=1024, cpu_seconds=600)
    assert config.limits == expected
    host = make_host(allow_all=True, config=config)
    script = "ulimit -v; ulimit -f; ulimit -t; ulimit -c"
    result = host.run(ExecRequest(["sh", "-c", script], str(tmp_path), mode=FULL_ACCESS))
    assert result.ok, result.stderr.text
    assert result.limits == expected
    # KiB of address space, 512-byte blocks of file size, seconds of CPU, and no core dumps.
    assert result.stdout.text.split() == [str(2048 * 1024), str(1024 * 2048), "600", "0"]


# --- the policy page ------------------------------------------------------------------------

POLICY_PAGE = DOCS / "policy.md"
AGENTS_TOML = EXAMPLES / "agents.toml"
EXAMPLE_WORKSPACE = "/home/me/project"


def table_rows(body: str) -> list[list[str]]:
    """The cells of the Markdown table rows in ``body`` (the header and rule left out)."""
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in body.splitlines()
        if line.startswith("| ")
    ]
    return [row for row in rows[1:] if not set("".join(row)) <= set("-: ")]


def unquoted(cell: str) -> str:
    assert cell.startswith("`") and cell.endswith("`"), cell
    return cell[1:-1]


def toml_default(value: object) -> str:
    """How the keys table writes an attrs default: unset, or the TOML value."""
    if value is None:
        return "unset"
    if isinstance(value, attrs.Factory):  # an empty table: credentials = {}
        return toml_default(value.factory())
    if isinstance(value, tuple):
        return "`[" + ", ".join(f'"{item}"' for item in value) + "]`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value}`"


def profile_keys() -> dict[str, object]:
    """Every key of ``[agents.NAME]`` with its default: the fields of Profile and Budget."""
    keys: dict[str, object] = {}
    for field in attrs.fields(Profile):
        if field.name == "name":  # the table's key, not a key in it
            continue
        if field.name == "budget":
            keys.update({f"budget.{sub.name}": sub.default for sub in attrs.fields(Budget)})
        else:
            keys[field.name] = field.default
    return keys


def test_the_policy_page_has_a_row_for_every_profile_key():
    rows = {unquoted(row[0]): row for row in table_rows(section(POLICY_PAGE, "### The keys"))}
    assert sorted(rows) == sorted(profile_keys())
    for key, default in profile_keys().items():
        assert rows[key][2].startswith(toml_default(default)), (key, rows[key][2])


def test_the_policy_page_lists_the_rules_in_their_order():
    body = section(POLICY_PAGE, "## The decision rules")
    named = re.findall(r"^\d+\. \*\*([a-z]+)\*\*:", body, flags=re.M)
    assert named == [rule.__name__ for rule in policy.RULES]


COMMAND_OF_CLASS = {
    "reads": ["ls"],
    "writes": ["touch", "notes"],
    "network": ["git", "fetch"],
    "destroys": ["rm", "notes"],
}


def decision_of(host, request: ExecRequest, log) -> tuple[str, str]:
    """The verdict and reason the host recorded for ``request``, whatever it did next."""
    # Denied, held, or allowed and then no sandbox here: the decision was recorded.
    with contextlib.suppress(StockadeError):
        host.run(request)
    permissions = [event for event in log.events if event.kind == "permission"]
    return permissions[-1].decision.verdict, permissions[-1].decision.reason


@pytest.mark.parametrize("origin", ["cli", "api", "mcp"])
def test_the_default_profile_decides_as_the_policy_page_says(make_host, tmp_path, origin):
    rows = table_rows(section(POLICY_PAGE, "## The default profile"))
    assert sorted(unquoted(row[0]) for row in rows) == sorted(COMMAND_OF_CLASS)
    for cell, verdict, reason in rows:
        kind = unquoted(cell)
        log = EventLog()
        host = make_host(plugins=[log])
        request = ExecRequest(
            COMMAND_OF_CLASS[kind], str(tmp_path), mode=FULL_ACCESS, origin=origin
        )
        assert decision_of(host, request, log) == (verdict, unquoted(reason))
        assert log.events[1].classification.kind == kind
        if verdict == "ask":  # approved in advance by a person, never by an MCP request
            yes = attrs.evolve(request, preapproved=True)
            expected = ("ask", unquoted(reason))
            if origin != "mcp":
                expected = ("allow", f"approved in advance: {unquoted(reason)}")
            assert decision_of(host, yes, log) == expected


def example_agents(workspace: Path) -> Config:
    """docs/examples/agents.toml, with its workspace moved to ``workspace``."""
    text = AGENTS_TOML.read_text(encoding="utf-8")
    assert EXAMPLE_WORKSPACE in text
    return parse_config(text.replace(EXAMPLE_WORKSPACE, str(workspace)))


@pytest.fixture
def workspace(tmp_path) -> Path:
    """The example's workspace, holding an ``ls`` of the agent's own."""
    folder = tmp_path.resolve() / "project"
    folder.mkdir()
    own = folder / "ls"
    own.write_text("#!/bin/sh\ntouch pwned\n")
    own.chmod(0o755)
    return folder


def test_the_policy_example_decides_as_the_table_says(make_host, workspace):
    config = example_agents(workspace)
    rows = table_rows(section(POLICY_PAGE, "### An example"))
    assert {unquoted(row[0]) for row in rows} == set(config.agents)
    for profile, command, verdict, reason in rows:
        match = re.fullmatch(r"`([^`]+)`(?:, as step (\d+))?", command)
        assert match, command
        argv, step = match.group(1).split(), int(match.group(2) or 1)
        log = EventLog()
        host = make_host(plugins=[log], config=config)
        name = unquoted(profile)
        # A profile without a workspace of its own name works in its folder under the store.
        own = name != "default" and not config.agents[name].workspace
        cwd = None if own else str(workspace)
        request = ExecRequest(argv, cwd, mode=FULL_ACCESS, profile=name)
        for _ in range(step - 1):  # every command asked counts as a step, denied or not
            with pytest.raises(PolicyDenied):
                host.run(attrs.evolve(request, argv=["touch", "x"]))
        expected = unquoted(reason).replace(EXAMPLE_WORKSPACE, str(workspace))
        assert decision_of(host, request, log) == (verdict, expected), command
    assert not (workspace / "pwned").exists()


def test_the_policy_example_profiles_set_what_the_keys_table_says(workspace, tmp_path):
    config = example_agents(workspace)
    reviewer = resolve(
        ExecRequest(["ls"], mode="workspace-write", profile="reviewer"), config, os.environ
    )
    assert (reviewer.mode, reviewer.timeout) == ("read-only", 60.0)
    own = os.path.join(os.environ["XDG_STATE_HOME"], "stockade", "workspaces", "reviewer")
    assert (reviewer.workspace, reviewer.cwd) == (own, own)  # a folder of its own
    builder = resolve(ExecRequest(["ls"], profile="builder", memory_mb=4096), config, os.environ)
    assert (builder.cwd, builder.workspace) == (str(workspace), str(workspace))
    assert builder.limits.memory_mb == 2048  # a cap: a request may not ask for more
    with pytest.raises(StockadeError) as outside:
        resolve(ExecRequest(["ls"], str(tmp_path), profile="builder"), config, os.environ)
    assert outside.value.code == "bad_cwd"


def test_the_workspaces_page_lists_every_kept_cache_and_the_quota_result():
    from stockade.workspace.folders import CACHE_ENV

    text = (DOCS / "workspaces.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\s*\| `([A-Za-z_]+)` \| `([a-z-]+)` \|$", text, re.MULTILINE))
    assert rows == CACHE_ENV
    assert '`limit_hit = "quota"`' in text and "`quota_exceeded`" in text


def test_the_store_is_where_the_policy_page_says(monkeypatch):
    text = POLICY_PAGE.read_text(encoding="utf-8")
    assert "`$XDG_STATE_HOME/stockade/store.db`" in text
    assert "`~/.local/state/stockade/store.db`" in text
    monkeypatch.setenv("XDG_STATE_HOME", "/state")
    assert store_path(Config()) == "/state/stockade/store.db"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", "/home/me")
    assert store_path(Config()) == "/home/me/.local/state/stockade/store.db"


# --- the record page ------------------------------------------------------------------------

RECORD_PAGE = DOCS / "record.md"


def test_the_record_page_quotes_what_verify_says():
    stockade = ROOT / "core" / "src" / "stockade"
    # One message may be split over adjacent literals: join them.
    source = re.sub(
        r'"\s*\n\s*f?"', "", (stockade / "record" / "verify.py").read_text(encoding="utf-8")
    )
    table = section(RECORD_PAGE, "## What `stockade verify` checks")
    quoted = re.findall(r"\| `([^`]+)`", table)
    assert len(quoted) == 15, quoted
    field = r"\{[^}]+\}"
    for message in quoted:
        # Capitals stand for values the code writes as f-string fields (the longer first).
        pattern = re.escape(message)
        for name in ("STREAM", "RUN", "DIGEST"):
            pattern = pattern.replace(name, "\0")
        pattern = pattern.replace("N", field).replace("M", field).replace("\0", field)
        assert re.search(pattern.replace("1", f"(1|{field})", 1), source), message


def test_the_record_page_names_every_event_kind():
    import typing

    from stockade.record import events

    kinds = {
        cls.__attrs_attrs__.kind.default  # type: ignore[attr-defined]
        for cls in typing.get_args(events.Event)
    }
    table = section(RECORD_PAGE, "## The events")
    assert set(re.findall(r"^\| `(\w+)` \|", table, re.M)) == kinds


# --- the network page -----------------------------------------------------------------------

NETWORK_PAGE = DOCS / "network.md"


def test_the_network_page_rules_parse_as_it_says():
    from stockade.egress.proxy import decide, parse_hosts
    from stockade.errors import ConfigError

    table = section(NETWORK_PAGE, "## Host rules")
    entries = [
        e for row in re.findall(r"^\| (.+?) \|", table, re.M) for e in re.findall(r"`([^`]+)`", row)
    ]
    assert entries == [
        "github.com",
        "pypi.org:8443",
        "*.example.com",
        "127.0.0.1:8080",
        "[::1]:80",
        "localhost:5432",
    ]
    rules = parse_hosts(entries)
    assert decide(rules, "github.com", 443)[0] and not decide(rules, "github.com", 80)[0]
    assert decide(rules, "a.example.com", 443)[0] and not decide(rules, "example.com", 443)[0]
    for bad in ("*", "com", "*.io", ""):
        with pytest.raises(ConfigError):
            parse_hosts([bad])


def test_the_network_page_quotes_the_refusal():
    from stockade.egress.proxy import decide, parse_hosts

    allowed, reason = decide(parse_hosts(["github.com"]), "evil.com", 443)
    assert not allowed
    assert f"stockade egress proxy: {reason.split(' (')[0]}" in NETWORK_PAGE.read_text().replace(
        "\n  ", " "
    )
