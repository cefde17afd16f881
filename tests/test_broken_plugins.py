"""A third-party plugin that fails to load is reported and skipped, unless it is selected.

Four real distributions are written to ``tmp_path`` (a package and a ``*.dist-info`` with
its ``entry_points.txt``, as an installer leaves them) and put on the path: one whose module
does not exist, one whose entry point names a missing attribute, one whose register hook
raises, one with a hook no spec has. The real command line runs with them installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from helpers.cli import stockade
from stockade.errors import PluginError
from stockade.request.spec import ExecRequest

BOOM = """
from stockade import hookimpl

@hookimpl
def stockade_register_sandboxes(register):
    raise RuntimeError("boom while registering")
"""

BADATTR = """
from stockade import hookimpl

@hookimpl
def stockade_register_sandboxes(register):
    pass
"""

TYPO = """
from stockade import hookimpl

@hookimpl
def stockade_register_sandboxez(register):
    pass
"""

# name -> (entry point value, module source or None for no package at all)
BROKEN = {
    "ghost": ("stockade_ex26_ghost.plugin", None),
    "badattr": ("stockade_ex26_badattr.plugin:nothing_here", BADATTR),
    "boom": ("stockade_ex26_boom.plugin", BOOM),
    "typo": ("stockade_ex26_typo.plugin", TYPO),
}
STAGES = {"ghost": "import", "badattr": "import", "boom": "register", "typo": "hook spec"}
CAUSES = {
    "ghost": "ModuleNotFoundError: No module named 'stockade_ex26_ghost'",
    "badattr": "AttributeError",
    "boom": "RuntimeError: boom while registering",
    "typo": "stockade_register_sandboxez",
}


def install_broken(site: Path) -> None:
    """Write the four broken distributions into ``site``."""
    for name, (value, source) in BROKEN.items():
        if source is not None:
            package = site / f"stockade_ex26_{name}"
            package.mkdir(parents=True)
            (package / "__init__.py").write_text("")
            (package / "plugin.py").write_text(textwrap.dedent(source))
        info = site / f"stockade_ex26_{name}-0.3.dist-info"
        info.mkdir(parents=True)
        (info / "entry_points.txt").write_text(f"[stockade]\n{name} = {value}\n")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    folder = tmp_path / "site"
    install_broken(folder)
    return folder


def _cli(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return stockade(*args, cwd=cwd, env={**os.environ, "PYTHONPATH": str(site)})


def test_the_host_skips_and_keeps_each_broken_plugin(make_host, site, monkeypatch):
    monkeypatch.syspath_prepend(str(site))
    host = make_host(allow_all=True)
    broken = {p.name: p for p in host.hooks.broken()}
    assert set(broken) == set(BROKEN)
    for name, plugin in broken.items():
        assert plugin.stage == STAGES[name]
        assert CAUSES[name] in plugin.cause
        assert plugin.dist == f"stockade_ex26_{name}"
        assert plugin.version == "0.3"
        assert not host.pm.has_plugin(name)  # nothing of it stays half-registered
    assert "bubblewrap" in host.sandboxes.names()  # the others still load


def test_selecting_a_broken_plugin_fails_closed_naming_it(make_host, site, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(site))
    host = make_host(allow_all=True)
    canary = tmp_path / "ran"
    request = ExecRequest(["touch", str(canary)], str(tmp_path), sandbox="boom")
    with pytest.raises(PluginError) as caught:
        host.run(request)
    assert not canary.exists()
    error = caught.value
    assert "'boom'" in error.message
    assert "RuntimeError: boom while registering" in error.message
    assert error.details["plugin"] == "boom"
    assert error.details["stage"] == "register"
    # Control: the same request on a working provider does run.
    host.run(ExecRequest(["touch", str(canary)], str(tmp_path), sandbox="bubblewrap"))
    assert canary.exists()


def test_an_unknown_name_lists_the_plugins_that_failed(make_host, site, monkeypatch):
    monkeypatch.syspath_prepend(str(site))
    host = make_host(allow_all=True)
    with pytest.raises(PluginError) as caught:
        host.sandboxes.get("nosuch")
    assert "plugin 'ghost'" in caught.value.message
    assert sorted(caught.value.details["failed"]) == sorted(BROKEN)


def test_a_broken_plugin_registered_in_code_still_raises(make_host):
    class Raises:
        from stockade import hookimpl

        @hookimpl
        def stockade_register_sandboxes(self, register):
            raise RuntimeError("mine")

    with pytest.raises(RuntimeError, match="mine"):
        make_host(plugins=[Raises()])


def test_run_works_with_one_stderr_line_per_broken_plugin(site, tmp_path):
    done = _cli(site, tmp_path, "run", "--mode", "workspace-write", "--", "touch", "made")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "made").exists()
    lines = [line for line in done.stderr.splitlines() if line.startswith("stockade: skipped")]
    assert len(lines) == len(BROKEN)
    for name in BROKEN:
        assert sum(f"plugin '{name}' from stockade_ex26_{name} 0.3" in x for x in lines) == 1


def test_run_selecting_it_fails_closed_with_a_structured_error(site, tmp_path):
    args = ("run", "--json", "--sandbox", "boom", "--", "touch", "made")
    done = _cli(site, tmp_path, *args)
    assert done.returncode != 0
    assert not (tmp_path / "made").exists()
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "plugin"
    assert error["details"]["plugin"] == "boom"
    assert "RuntimeError: boom while registering" in error["details"]["cause"]
    text = _cli(site, tmp_path, "run", "--sandbox", "ghost", "--", "touch", "made")
    assert text.returncode != 0
    assert "error[plugin]: sandbox provider 'ghost' comes from a plugin 'ghost'" in text.stderr
    assert "No module named 'stockade_ex26_ghost'" in text.stderr
    assert not (tmp_path / "made").exists()


def test_plugins_and_doctor_report_them(site, tmp_path):
    listed = _cli(site, tmp_path, "plugins")
    assert listed.returncode == 0, listed.stderr
    assert "stockade: skipped" not in listed.stderr  # said once, in the listing
    tail = listed.stdout.split("failed to load (skipped; selecting one of them fails):")[1]
    for name in BROKEN:
        assert f"{name}  (stockade_ex26_{name} 0.3)" in tail
        assert f"{STAGES[name]}: " in tail
    as_json = json.loads(_cli(site, tmp_path, "plugins", "--json").stdout)
    assert {b["name"]: b["stage"] for b in as_json["broken"]} == STAGES
    doctor = _cli(site, tmp_path, "doctor")
    assert "plugins that failed to load" in doctor.stdout
    for name in BROKEN:
        assert f"[no] {name} (stockade_ex26_{name} 0.3): failed to load ({STAGES[name]})" in (
            doctor.stdout
        )
    assert doctor.returncode == 0  # the default mode still runs: they were skipped
    report = json.loads(_cli(site, tmp_path, "doctor", "--json").stdout)
    assert len(report["broken"]) == len(BROKEN)
