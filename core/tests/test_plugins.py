"""The plugin manager factory, blocking, registries, and the entry point scan."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest

from stockade import hookimpl
from stockade.config.schema import Config, PluginsConfig
from stockade.confine.provider import SandboxProvider
from stockade.errors import PluginError, SandboxUnavailable
from stockade.plugin.entrypoints import entry_points
from stockade.plugin.manager import get_plugin_manager
from stockade.request.plan import LaunchPlan, Probe, SandboxFacts
from stockade.request.result import ProcessOutcome
from stockade.request.spec import ExecRequest
from stockade.run.executor import Executor


def test_entry_point_scan_matches_importlib_metadata():
    ours = {(ep.name, ep.value) for ep in entry_points("stockade")}
    theirs = {(ep.name, ep.value) for ep in importlib.metadata.entry_points(group="stockade")}
    assert ours == theirs
    assert ("local", "stockade_local.plugin") in ours
    pytest_ours = {(ep.name, ep.value) for ep in entry_points("pytest11")}
    pytest_theirs = {
        (ep.name, ep.value) for ep in importlib.metadata.entry_points(group="pytest11")
    }
    assert pytest_ours == pytest_theirs


def test_entry_point_scan_first_on_path_wins(tmp_path):
    for where, value in (("a", "first:plugin"), ("b", "second:plugin")):
        info = tmp_path / where / "demo_dist-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "entry_points.txt").write_text(f"[other]\nx = y\n\n[stockade]\ndemo = {value}\n")
    found = entry_points("stockade", [str(tmp_path / "a"), str(tmp_path / "b")])
    assert [(ep.name, ep.value, ep.dist, ep.version) for ep in found] == [
        ("demo", "first:plugin", "demo_dist", "1.0")
    ]


def test_installed_plugins_load_and_builtins_are_plugins():
    pm = get_plugin_manager(Config(), environ={})
    names = {name for name, _ in pm.list_name_plugin()}
    assert {"local", "stockade.builtin.policy", "stockade.builtin.unconfined"} <= names


def test_blocked_by_config_is_never_imported():
    sys.modules.pop("stockade_local.plugin", None)
    config = Config(plugins=PluginsConfig(disable=("local",)))
    pm = get_plugin_manager(config, environ={})
    assert not pm.has_plugin("local")
    assert pm.is_blocked("local")
    assert "stockade_local.plugin" not in sys.modules


def test_blocked_by_environment(make_host):
    host = make_host(
        environ={
            "STOCKADE_DISABLE_PLUGINS": " local , stockade.builtin.unconfined,bubblewrap,landlock"
        }
    )
    assert host.executors.names() == []
    assert host.sandboxes.names() == []
    with pytest.raises(PluginError, match=r"unknown executor 'local'; installed: none"):
        _ = host.doer.executor


def test_unknown_names_list_what_is_installed(make_host):
    host = make_host(config=Config(executor="nope"))
    with pytest.raises(PluginError) as caught:
        _ = host.doer.executor
    assert "unknown executor 'nope'; installed: local" in caught.value.message
    assert caught.value.details["installed"] == ["local"]
    request = ExecRequest(["true"], sandbox="bubblewrap", mode="read-only", origin="cli")
    with pytest.raises(
        PluginError, match=r"unknown sandbox provider 'bubblewrap'; installed: none"
    ):
        host.run(request)


class _Named(Executor):
    PLUGIN_NAME = "local"

    def run(self, plan: LaunchPlan, *, abort: object = None) -> ProcessOutcome:
        raise NotImplementedError


def test_duplicate_names_are_an_error(make_host):
    class Twin:
        @hookimpl
        def stockade_register_executors(self, register):
            register(_Named)

    with pytest.raises(PluginError, match=r"two executors are named 'local'"):
        make_host(plugins=[Twin()])


def test_unknown_hook_fails_check_pending(make_host):
    class Typo:
        @hookimpl
        def stockade_clasify(self, spec):
            return None

    with pytest.raises(PluginError, match="stockade_clasify"):
        make_host(plugins=[Typo()])


class _Broken(SandboxProvider):
    PLUGIN_NAME = "broken"
    MODES = frozenset({"read-only", "workspace-write"})
    PRIORITY = 10

    @classmethod
    def probe(cls) -> Probe:
        return Probe(False, "the kernel lacks the feature this needs")

    def confine(self, spec):
        raise AssertionError("never called for an unusable provider")


class _Jail(SandboxProvider):
    PLUGIN_NAME = "jail"
    MODES = frozenset({"read-only"})
    PRIORITY = 5

    @classmethod
    def probe(cls) -> Probe:
        return Probe(True, "fine")

    def confine(self, spec):
        return LaunchPlan.from_spec(spec, SandboxFacts("jail", spec.mode, enforcement="full"))


class _Providers:
    @hookimpl
    def stockade_register_sandboxes(self, register):
        register(_Broken)
        register(_Jail)


def test_auto_picks_the_strongest_usable_provider_for_the_mode(make_host):
    host = make_host(plugins=[_Providers()], allow_all=True)
    result = host.run(ExecRequest(["true"], mode="read-only"))
    assert result.sandbox == SandboxFacts("jail", "read-only", enforcement="full")
    with pytest.raises(SandboxUnavailable) as caught:
        host.run(ExecRequest(["cp", "--version"], mode="workspace-write"))  # writes
    assert "broken: the kernel lacks the feature" in caught.value.message


def test_explicit_provider_must_support_mode_and_work(make_host):
    host = make_host(plugins=[_Providers()], allow_all=True)
    with pytest.raises(SandboxUnavailable, match="'jail' cannot enforce mode workspace-write"):
        host.run(ExecRequest(["cp", "--version"], mode="workspace-write", sandbox="jail"))
    with pytest.raises(SandboxUnavailable, match="'broken' is not usable here"):
        host.run(ExecRequest(["true"], mode="read-only", sandbox="broken"))
    with pytest.raises(SandboxUnavailable, match="'none' cannot enforce mode read-only"):
        host.run(ExecRequest(["true"], mode="read-only", sandbox="none"))


def test_a_hook_with_a_wrong_parameter_is_a_plugin_error(make_host):
    class WrongArgs:
        @hookimpl
        def stockade_classify(self, spec, extra):
            return None

    with pytest.raises(PluginError, match="stockade_classify"):
        make_host(plugins=[WrongArgs()])
