"""The conformance kit judges a provider by what it declares: a provider that confines nothing
fails it, by name; pins and declarations are checked; the table says what happened.

The provider that confines nothing is installed the way a third party's is: a module and a
``*.dist-info/entry_points.txt`` on the path of a ``python -m stockade.conformance`` run.
Only attacks that are harmless unconfined are run against it (the kit's ``ptrace`` attack,
for one, would stop the machine's PID 1).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stockade.confine.promises import CORE, EXTRA, Gap, Promise, pins
from stockade.confine.provider import SandboxProvider
from stockade.conformance import ground
from stockade.conformance.table import PINNED, Outcomes, render, verdict

EMPTY = '''
"""A sandbox provider that confines nothing and claims every promise, ``full``."""

from stockade import hookimpl
from stockade.confine.promises import Promise
from stockade.confine.provider import SandboxProvider
from stockade.request.plan import LaunchPlan, Probe, SandboxFacts


class EmptySandbox(SandboxProvider):
    PLUGIN_NAME = "empty"
    MODES = frozenset({"read-only", "workspace-write"})
    PROMISES = frozenset(Promise)

    @classmethod
    def probe(cls):
        return Probe(True, "confines nothing")

    def confine(self, spec):
        facts = SandboxFacts(self.PLUGIN_NAME, spec.mode, enforcement="full")
        return LaunchPlan.from_spec(spec, facts)


@hookimpl
def stockade_register_sandboxes(register):
    register(EmptySandbox)
'''

# Harmless without a sandbox: they read and write only the test's own box (and a canary of
# their own under ~/.ssh), and look at /proc/self.
SAFE = (
    "test_credential_stores_are_unreadable or test_nothing_outside_the_workspace_is_writable"
    " or test_the_real_shadow_file_is_masked_and_passwd_is_not or test_no_capabilities"
    " or test_private_tmp_and_fresh_proc or test_only_loopback_inside"
    " or test_the_run_home_is_writable or test_caches_are_read_in_every_mode"
)


def _kit(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    (site / "kit_empty-0.1.dist-info").mkdir(parents=True, exist_ok=True)
    (site / "kit_empty-0.1.dist-info" / "entry_points.txt").write_text(
        "[stockade]\nempty = kit_empty\n"
    )
    (site / "kit_empty.py").write_text(textwrap.dedent(EMPTY))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOCKADE_")}
    env["PYTHONPATH"] = str(site)
    return subprocess.run(
        [sys.executable, "-m", "stockade.conformance", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_a_provider_that_confines_nothing_fails_the_kit_by_name(tmp_path):
    table = tmp_path / "table.md"
    proc = _kit(tmp_path, "--sandbox", "empty", "-q", "-k", SAFE, "--conformance-table", str(table))
    if os.geteuid() == 0:  # as root the kit refuses it before any attack
        assert proc.returncode == ground.REFUSED, proc.stdout + proc.stderr
        assert "refusing to attack empty as root: its first probe wrote" in proc.stdout
        assert "throwaway account or container" in proc.stdout
        assert not table.exists()  # nothing was attacked
        return
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("empty: FAILED "), proc.stdout
    failed = set(last.removeprefix("empty: FAILED ").split(", "))
    expected = {"credential-stores", "writes-confined", "system-secrets", "no-capabilities"}
    expected |= {"run-home", "caches"}
    assert expected | {"private-view", "network-namespace"} == failed, last
    written = table.read_text()
    assert "| credential-stores | core | FAIL | test_credential_stores_are_unreadable[" in written
    assert written.strip() in proc.stdout  # the same table, printed last


def test_the_kit_needs_a_sandbox_and_knows_the_installed_ones(tmp_path):
    usage = _kit(tmp_path, "-q")
    assert usage.returncode == 2 and "--sandbox NAME" in usage.stderr
    unknown = _kit(tmp_path, "--sandbox", "nosuch", "-q")
    assert unknown.returncode != 0
    assert "no such sandbox provider" in unknown.stdout + unknown.stderr
    assert "empty" in unknown.stdout + unknown.stderr  # the installed ones are named


def test_every_attack_names_one_promise():
    import importlib
    import pkgutil

    from stockade.conformance import suite

    unmarked = []
    for info in pkgutil.iter_modules(suite.__path__):
        module = importlib.import_module(f"{suite.__name__}.{info.name}")
        assert not hasattr(module, "pytestmark"), f"{info.name}: mark each test, not the module"
        for name, function in vars(module).items():
            if not name.startswith("test_") or not callable(function):
                continue
            marks = [m for m in getattr(function, "pytestmark", []) if m.name == "promise"]
            takes_sandbox = {"box", "host", "sandbox"} & set(function.__code__.co_varnames)
            if takes_sandbox and len(marks) != 1:
                unmarked.append(f"{info.name}.{name}")
    assert not unmarked, unmarked


def test_what_the_kit_expects_comes_from_the_declaration():
    class Pinned(SandboxProvider):
        PLUGIN_NAME = "pinned"
        MODES = frozenset({"read-only"})
        PROMISES = CORE | {Promise.PID_NAMESPACE}
        GAPS = (Gap(Promise.PRIVATE_VIEW, "no mount namespace"),)

        @classmethod
        def probe(cls):
            raise NotImplementedError

        def confine(self, spec):
            raise NotImplementedError

    assert ground.expectation(Pinned, Promise.SECCOMP) == ("hold", "")
    assert ground.expectation(Pinned, Promise.PID_NAMESPACE) == ("hold", "")
    assert ground.expectation(Pinned, Promise.PRIVATE_VIEW) == ("pinned", "no mount namespace")
    kind, why = ground.expectation(Pinned, Promise.NETWORK_NAMESPACE)
    assert kind == "skip" and "does not declare network-namespace" in why
    assert CORE.isdisjoint(EXTRA) and set(Promise) == CORE | EXTRA


def test_a_gap_needs_a_reason_and_one_pin_per_promise():
    with pytest.raises(ValueError, match="needs a reason"):
        Gap(Promise.SECCOMP, "  ")
    assert Gap("seccomp", "why").promise is Promise.SECCOMP
    with pytest.raises(ValueError, match="pinned twice"):
        pins((Gap(Promise.SECCOMP, "a"), Gap(Promise.SECCOMP, "b")))


def test_the_verdict_of_each_promise():
    assert verdict({"m::a": "passed", "m::b": "passed"}, None) == ("pass", "2 attacks")
    assert verdict({"m::a": "passed", "m::b[x]": "failed"}, None) == ("FAIL", "b[x]")
    assert verdict({"m::a": "pinned"}, "why") == ("pinned", "why")
    result, why = verdict({"m::a": "failed"}, "why")  # a pinned gap that no longer fails
    assert result == "FAIL" and why.startswith("pinned gap now holds")
    assert verdict({"m::a": "skipped"}, None, declared=False) == ("not declared", "")
    assert verdict({"m::a": "skipped"}, None) == ("skipped", "cannot arise here")
    assert verdict({}, None) == ("not run", "")


def test_the_table_keeps_a_cases_worst_outcome_and_tells_pins_from_skips():
    outcomes = Outcomes()
    outcomes.add("p", "seccomp", "m::a", "passed", None)
    outcomes.add("p", "seccomp", "m::a", "failed", None)  # its teardown failed
    outcomes.add("p", "seccomp", "m::a", "passed", None)
    outcomes.add("p", "pid-namespace", "m::b", "skipped", PINNED + "no PID namespace")
    outcomes.add("p", "limits", "m::c", "skipped", "cannot arise as root")
    assert outcomes.of("p", "seccomp") == {"m::a": "failed"}
    assert outcomes.of("p", "pid-namespace") == {"m::b": "pinned"}
    assert outcomes.of("p", "limits") == {"m::c": "skipped"}
    text = render(outcomes, {})
    assert "| seccomp | core | FAIL | a |" in text
    assert text.splitlines()[-1] == "p: FAILED seccomp"


def test_removing_a_box_leaves_a_host_file_linked_into_it_as_it_was(tmp_path):
    """An attack may hard-link a host file (``/etc/passwd``) into the workspace: cleaning
    up must not change that file's mode, while still emptying folders an attack locked."""
    host_file = tmp_path / "passwd"
    host_file.write_text("root:x:0:0\n")
    host_file.chmod(0o644)
    (tmp_path / "box").mkdir()
    made = ground.Box(tmp_path / "box", "none", ground.providers()["none"])
    os.link(host_file, made.ws / "linked")
    (made.ws / "locked" / "deep").mkdir(parents=True)
    (made.ws / "locked" / "deep" / "f").write_text("x")
    (made.ws / "locked" / "deep").chmod(0)
    (made.ws / "locked").chmod(0)
    made.remove()
    assert not made.root.exists()
    assert host_file.stat().st_mode & 0o7777 == 0o644


def test_removing_a_box_never_changes_a_host_folder_a_link_in_it_leads_to(tmp_path, monkeypatch):
    """A process an attack left behind may swap a folder of the box for a symlink to a host
    folder between the cleanup's check and its change: the host folder keeps its mode and
    its content (the check is made to miss here, as if the swap came right after it)."""
    host_dir = tmp_path / "etc"
    host_dir.mkdir()
    (host_dir / "kept").write_text("x")
    host_dir.chmod(0o500)
    (tmp_path / "box").mkdir()
    made = ground.Box(tmp_path / "box", "none", ground.providers()["none"])
    (made.ws / "swapped").symlink_to(host_dir)
    (made.ws / "locked").mkdir()
    (made.ws / "locked" / "f").write_text("x")
    (made.ws / "locked").chmod(0)
    monkeypatch.setattr(ground.os.path, "islink", lambda _path: False)
    made.remove()
    assert not made.root.exists()
    assert host_dir.stat().st_mode & 0o7777 == 0o500
    assert (host_dir / "kept").read_text() == "x"
    host_dir.chmod(0o700)
