"""Agent Skills through the skill tool: reading, the double-safety gate, and runs.

Every run here is real: the script goes through the host (classified, decided by the built-in
policy, confined by the default sandbox, recorded), and the examples under ``skills/`` are
the ones the docs show."""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import pytest

from helpers.skills import EXAMPLES, write_skill
from stockade.config.schema import Config, SkillsConfig
from stockade.errors import UsageError
from stockade.request.spec import ExecRequest, Profile
from stockade.testing import EventLog
from stockade_skills import BadResource, ExecutionError, SkillNotFound, SkillTool

# python3 from the system: a virtual environment under /tmp (a CI clone) is not in the sandbox.
SYSTEM_ENV = {**os.environ, "PATH": "/usr/bin:/bin"}
PROBE = (
    "import os, sys\n"
    "open(os.path.join(os.environ['STOCKADE_WORKSPACE'], 'ran'), 'w').write(' '.join(sys.argv))\n"
    "print('RAN', *sys.argv[1:])\n"
)


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """The person's working directory, which is the default profile's workspace."""
    folder = tmp_path / "ws"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def make_tool(make_host, tmp_path, *, skills: Path = EXAMPLES, programs=None, safe=True, **kw):
    log = EventLog()
    config = Config(
        skills=SkillsConfig(
            project=(str(skills),), user=(str(tmp_path / "no-user"),), safe_mode=safe
        ),
        agents={"bot": Profile(name="bot", programs=programs, workspace=os.getcwd())},
    )
    host = make_host(config=config, plugins=[log], environ=SYSTEM_ENV)
    return SkillTool(host, profile=kw.pop("profile", "bot"), **kw), log


def leftovers(folder: Path) -> list[str]:
    return [n for n in os.listdir(folder) if n.startswith(".stockade-skill-")]


# --- reading ------------------------------------------------------------------------------


def test_reading_returns_a_window_of_the_text(make_host, tmp_path, ws):
    tool, _ = make_tool(make_host, tmp_path)
    whole = (EXAMPLES / "unit-convert" / "references" / "units.md").read_text()
    first = tool("unit-convert", "references/units.md", max_chars=100)
    assert first.text == whole[:100] and first.total_chars == len(whole)
    rest = tool("unit-convert", "references/units.md", offset=first.next_offset)
    assert rest.text == whole[100:] and rest.next_offset is None
    instructions = tool("unit-convert")
    assert "scripts/convert.py VALUE FROM TO" in instructions.text
    assert "- assets/units.json" in instructions.text  # the list of its files
    with pytest.raises(UsageError):
        tool("unit-convert", offset=-1)


def test_a_resource_never_leads_outside_the_skill(make_host, tmp_path, ws):
    secret = tmp_path / "secret.txt"
    secret.write_text("CANARY")
    skills = tmp_path / "skills"
    folder = write_skill(skills, "s", "name: s\ndescription: d", {"references/ok.md": "fine"})
    (folder / "references" / "link.md").symlink_to(secret)
    os.link(secret, folder / "references" / "hard.md")
    tool, _ = make_tool(make_host, tmp_path, skills=skills)
    assert tool("s", "references/ok.md").text == "fine"  # the control
    for resource, why in (
        ("references/link.md", "leads outside"),
        ("references/hard.md", "hard link"),
        ("references/../../../secret.txt", "relative path inside"),
        ("/etc/passwd", "relative path inside"),
        ("references/none.md", "has no resource"),
        ("references", "not a plain file"),
    ):
        with pytest.raises(BadResource, match=why):
            tool("s", resource)
    with pytest.raises(SkillNotFound, match="found: s"):
        tool("nope")


# --- the double-safety gate ---------------------------------------------------------------

SAFE_MODES = {"true": "\nsafe_mode: true", "false": "\nsafe_mode: false", "missing": ""}


@pytest.mark.parametrize(
    ("global_off", "skill_safe", "allowed"),
    list(itertools.product((False, True), SAFE_MODES, (False, True))),
)
def test_every_gate_combination_and_only_the_open_one_runs(  # noqa: PLR0917 - parameters
    make_host, tmp_path, ws, global_off, skill_safe, allowed
):
    skills = tmp_path / "skills"
    write_skill(
        skills, "g", f"name: g\ndescription: d{SAFE_MODES[skill_safe]}", {"scripts/p.py": PROBE}
    )
    programs = ("python3",) if allowed else ("ls",)
    tool, log = make_tool(make_host, tmp_path, skills=skills, programs=programs, unsafe=global_off)
    opened = global_off and skill_safe == "false" and allowed
    gates = lambda: [  # noqa: E731
        e.decision for e in log.events if e.kind == "permission" and e.decision.by == "skill-gate"
    ]
    if opened:
        out = tool("g", "scripts/p.py", execute=True, args=["a b", "c"])
        assert "RAN a b c" in out.text and out.text.startswith("[SKILL_SCRIPT_EXECUTED]")
        assert (ws / "ran").read_text() == "scripts/p.py a b c"
        assert [d.verdict for d in gates()] == ["allow"]
        assert log.kinds(skip={"taint"}) == ["action", "permission", "permission", "result"]
    else:
        with pytest.raises(ExecutionError) as caught:
            tool("g", "scripts/p.py", execute=True, args=["x"])
        message = caught.value.message
        assert f"global safe_mode {'off' if global_off else 'on'}" in message
        assert {
            "true": "skill safe_mode true",
            "false": "skill safe_mode false",
            "missing": "not declared, so true",
        }[skill_safe] in message
        assert ("may run python3" if allowed else "may not run python3") in message
        assert str(skills / "g" / "scripts" / "p.py") in message
        assert caught.value.hint  # what to change
        assert not (ws / "ran").exists()
        assert [d.verdict for d in gates()] == ["deny"]
        assert "result" not in log.kinds()
    assert leftovers(ws) == []


def test_the_global_safety_can_be_off_in_the_config(make_host, tmp_path, ws):
    tool, _ = make_tool(make_host, tmp_path, safe=False)
    out = tool("unit-convert", "scripts/convert.py", execute=True, args=["1", "mi", "m"])
    assert "1 mi = 1609.34 m" in out.text
    with pytest.raises(ExecutionError, match=r"global safe_mode on \(the default\)"):
        make_tool(make_host, tmp_path)[0]("unit-convert", "scripts/convert.py", execute=True)


def test_an_open_gate_still_leaves_the_decision_to_the_policy(make_host, tmp_path, ws):
    skills = tmp_path / "skills"
    write_skill(
        skills, "g", "name: g\ndescription: d\nsafe_mode: false", {"scripts/p.sh": "echo RAN\n"}
    )
    tool, _ = make_tool(make_host, tmp_path, skills=skills, unsafe=True)
    # sh runs a script argv cannot show: the built-in policy asks, and no person is here.
    with pytest.raises(ExecutionError, match="needs a person's approval"):
        tool("g", "scripts/p.sh", execute=True)
    assert leftovers(ws) == [] and tool.host.store.waiting() == []  # the hold was declined
    approved = SkillTool(tool.host, profile="bot", unsafe=True, preapproved=True)
    assert "RAN" in approved("g", "scripts/p.sh", execute=True).text


# --- running --------------------------------------------------------------------------------


def test_a_python_script_runs_with_its_args_and_reads_its_references_and_assets(
    make_host, tmp_path, ws
):
    tool, log = make_tool(make_host, tmp_path, unsafe=True)
    out = tool("unit-convert", "scripts/convert.py", execute=True, args=["5", "km", "mi"])
    assert "5 km = 3.10686 mi" in out.text  # the factor came from assets/units.json
    assert out.result is not None and out.result.exit_code == 0
    explained = tool("unit-convert", "scripts/convert.py", execute=True, args=["--explain", "mi"])
    assert "international mile, exactly 1609.344 m" in explained.text  # references/units.md
    (ws / "data.csv").write_text("city,pop\nA,10\nB,30\n")
    report = tool("csv-summary", "scripts/summarize.py", execute=True, args=["data.csv"])
    assert "data.csv: 2 rows" in report.text and "min 10, max 30, mean 20" in report.text
    [action, *_] = [e for e in log.events if e.kind == "action"]
    assert action.argv == ("python3", "scripts/convert.py", "5", "km", "mi")
    assert action.cwd.startswith(str(ws / ".stockade-skill-"))
    assert leftovers(ws) == []


def test_a_non_zero_exit_and_a_timeout_are_execution_errors_that_leave_no_copy(
    make_host, tmp_path, ws
):
    skills = tmp_path / "skills"
    files = {
        "scripts/fail.py": "import sys; print('bad input', file=sys.stderr); sys.exit(3)\n",
        "scripts/slow.py": "import time; print('started', flush=True); time.sleep(60)\n",
        "scripts/lock.py": "import os; os.chmod('assets', 0); os.chmod('.', 0o500)\n",
        "assets/x": "x",
    }
    write_skill(skills, "r", "name: r\ndescription: d\nsafe_mode: false", files)
    tool, _ = make_tool(make_host, tmp_path, skills=skills, unsafe=True)
    with pytest.raises(ExecutionError, match="exited 3") as failed:
        tool("r", "scripts/fail.py", execute=True)
    assert failed.value.details["exit_code"] == 3
    assert "bad input" in failed.value.details["result"]
    assert leftovers(ws) == []
    with pytest.raises(ExecutionError, match="timed out after 1 s") as slow:
        tool("r", "scripts/slow.py", execute=True, timeout=1)
    assert "started" in slow.value.details["result"]
    assert leftovers(ws) == []
    tool("r", "scripts/lock.py", execute=True)  # it locked its copy's folders: still removed
    assert leftovers(ws) == []


def test_what_may_not_run_and_what_cannot(make_host, tmp_path, ws):
    skills = tmp_path / "skills"
    files = {
        "scripts/plain": "print('no interpreter named')\n",
        "scripts/gone.py": "#!/usr/bin/env no-such-interpreter-xyz\n",
        "tools/t.py": "print('non-standard entries run')\n",
        "assets/a.py": "print('never')\n",
        "top.py": "print('never')\n",
    }
    write_skill(skills, "w", "name: w\ndescription: d\nsafe_mode: false", files)
    tool, _ = make_tool(make_host, tmp_path, skills=skills, unsafe=True)
    with pytest.raises(BadResource, match="execute needs a resource"):
        tool("w", execute=True)
    for resource, kind in (("assets/a.py", "asset"), ("top.py", "root"), ("SKILL.md", "root")):
        with pytest.raises(BadResource, match=f"is a {kind} file"):
            tool("w", resource, execute=True)
    with pytest.raises(ExecutionError, match="names no interpreter"):
        tool("w", "scripts/plain", execute=True)
    with pytest.raises(ExecutionError, match=r"no-such-interpreter-xyz .*is not installed"):
        tool("w", "scripts/gone.py", execute=True)
    assert "non-standard entries run" in tool("w", "tools/t.py", execute=True).text
    assert leftovers(ws) == []


def test_the_envelope_keeps_within_the_budget(make_host, tmp_path, ws):
    skills = tmp_path / "skills"
    script = "print('x' * 100_000); print('THE END')\n"
    write_skill(
        skills, "b", "name: b\ndescription: d\nsafe_mode: false", {"scripts/big.py": script}
    )
    tool, _ = make_tool(make_host, tmp_path, skills=skills, unsafe=True)
    out = tool("b", "scripts/big.py", execute=True, max_chars=2000)
    assert len(out.text) < 3000 and out.text.rstrip().endswith("[/SKILL_SCRIPT_EXECUTED]")
    assert "THE END" in out.text and "characters cut" in out.text
    assert out.result is not None and out.result.stdout.total_bytes == 100_009


def test_the_cli_lists_shows_and_runs(tmp_path, ws, capsys, monkeypatch):
    monkeypatch.setenv("PATH", SYSTEM_ENV["PATH"])
    from stockade.cli import main

    config = tmp_path / "stockade.toml"
    config.write_text(f'[skills]\nproject = ["{EXAMPLES}"]\nuser = []\n')
    assert main(["--config", str(config), "skill", "list"]) == 0
    assert "unit-convert  (project, scripts may run)" in capsys.readouterr().out
    assert (
        main(["--config", str(config), "skill", "show", "unit-convert", "assets/units.json"]) == 0
    )
    assert '"mi": "1609.344"' in capsys.readouterr().out
    run = ["--config", str(config), "skill", "run", "unit-convert", "scripts/convert.py"]
    assert main([*run, "2", "h", "min"]) == 1
    assert "global safe_mode on ([skills] safe_mode)" in capsys.readouterr().err
    assert (
        main(["--config", str(config), "skill", "run", "--unsafe", *run[4:], "2", "h", "min"]) == 0
    )
    assert "2 h = 120 min" in capsys.readouterr().out
    assert (
        main(["--config", str(config), "skill", "run", "--unsafe", *run[4:], "2", "h", "kg"]) == 1
    )
    captured = capsys.readouterr()
    assert "exited 2" in captured.err and "h is a time, kg a mass" in captured.out
    assert main(["--config", str(config), "verify"]) == 0


def test_a_named_workspace_bounds_the_default_profile_and_no_agent_can_move_its_own(
    make_host, tmp_path, ws
):
    host = make_host(config=Config(agents={"bot": Profile(name="bot", workspace=str(ws))}))
    inner = ws / "inner"
    inner.mkdir()
    result = host.run(ExecRequest(["touch", "../made"], str(inner), workspace=str(ws)))
    assert result.exit_code == 0 and (ws / "made").exists()  # the workspace, not the cwd, bounds it
    with pytest.raises(UsageError, match="a request cannot name"):
        host.run(ExecRequest(["true"], profile="bot", workspace=str(tmp_path)))
    shutil.rmtree(inner)


def test_the_readmes_skill_line_runs(tmp_path, monkeypatch, capsys):
    import shlex

    from stockade.cli import main

    root = EXAMPLES.parent
    [line] = [t for t in (root / "README.md").read_text().splitlines() if " skill run " in t]
    argv = shlex.split(line.removeprefix("$ "))[2:]  # after "uv run"
    assert argv[:3] == ["stockade", "--config", "docs/examples/skills.toml"]
    monkeypatch.setenv("PATH", SYSTEM_ENV["PATH"])
    (tmp_path / "skills").symlink_to(EXAMPLES)  # the checkout's layout, in a folder of its own
    monkeypatch.chdir(tmp_path)
    assert main([argv[1], str(root / argv[2]), *argv[3:]]) == 0
    assert "5 km = 3.10686 mi" in capsys.readouterr().out
    assert leftovers(tmp_path) == []


def test_the_policy_still_decides_and_the_host_still_caps_past_an_open_gate(
    make_host, tmp_path, ws
):
    log = EventLog()
    config = Config(
        skills=SkillsConfig(project=(str(EXAMPLES),), user=()),
        agents={
            "reader": Profile(name="reader", autonomy="read-only", workspace=str(ws)),
            "bot": Profile(name="bot", workspace=str(ws)),
        },
    )
    host = make_host(config=config, plugins=[log], environ=SYSTEM_ENV)
    reader = SkillTool(host, profile="reader", unsafe=True)
    with pytest.raises(ExecutionError, match="the policy refused skill script") as refused:
        reader("unit-convert", "scripts/convert.py", execute=True, args=["1", "m", "cm"])
    assert "read-only" in refused.value.details["policy"]
    verdicts = [(e.decision.by, e.decision.verdict) for e in log.events if e.kind == "permission"]
    assert verdicts == [("skill-gate", "allow"), ("builtin-policy", "deny")]
    assert leftovers(ws) == []
    bot = SkillTool(host, profile="bot", unsafe=True)
    out = bot(
        "unit-convert", "scripts/convert.py", execute=True, args=["1", "m", "cm"], timeout=1e6
    )
    assert out.result is not None and out.result.timeout_s == config.timeout.max
