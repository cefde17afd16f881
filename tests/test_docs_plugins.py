"""plugins.md tells the truth: the example plugin (a classifier and a policy) and the example
backends (an executor and a sandbox provider) run as it says, and so do ``interpret`` and
``release`` after a run.

The examples come from docs/examples/, and two of the page's snippets from this file
(between the ``--8<--`` markers), so these tests exercise exactly the code the page shows."""

from __future__ import annotations

import asyncio
import os
from typing import ClassVar

import attrs
import pytest

from helpers.docs import FULL_ACCESS, example
from stockade import hookimpl
from stockade.config.schema import Config, PluginsConfig
from stockade.confine.provider import SandboxProvider
from stockade.errors import PluginError, PolicyDenied, PolicyHeld, SandboxUnavailable, StockadeError
from stockade.request.plan import LaunchPlan, SandboxFacts
from stockade.request.result import ProcessOutcome
from stockade.request.spec import ExecRequest, ExecSpec
from stockade.request.verdict import Classification

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
