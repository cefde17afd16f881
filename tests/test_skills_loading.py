"""Agent Skills before anything runs: loading and checking against the specification, the
copy a run gets, what a request can never carry, and the plugin imported only when asked
for (with a clear error when it is not installed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.skills import EXAMPLES, write_skill
from stockade.errors import UsageError
from stockade.request.spec import ExecRequest
from stockade_skills import Catalog, SkillNotFound
from stockade_skills.model import load_skill
from stockade_skills.resources import materialize

# --- loading and checking ---------------------------------------------------------------


def test_the_examples_load_without_a_problem():
    catalog = Catalog.find([(str(EXAMPLES), "project")])
    assert sorted(catalog.skills) == ["csv-summary", "unit-convert"]
    assert catalog.problems == ()
    assert all(skill.safe_mode is False for skill in catalog.skills.values())


@pytest.mark.parametrize(
    ("front", "field", "rule"),
    [
        ("name: Bad--Name\ndescription: d", "name", "lowercase ASCII"),
        ("name: -lead\ndescription: d", "name", "no leading"),
        (f"name: {'a' * 65}\ndescription: d", "name", "1-64 characters"),
        ("name: other\ndescription: d", "name", "equal its directory name"),
        (f"name: s\ndescription: {'d' * 1025}", "description", "at most 1024"),
        (f"name: s\ndescription: d\ncompatibility: {'c' * 501}", "compatibility", "at most 500"),
        ("name: s\ndescription: d\nmetadata:\n  n: 1", "metadata", "text to text"),
        ("name: s\ndescription: d\nmetadata: [1]", "metadata", "ignored"),
        ("name: s\ndescription: d\nsafe_mode: 'false'", "safe_mode", "counts as true"),
        ("name: s\ndescription: d\nallowed-tools: 3", "allowed-tools", "space-separated"),
        ("name: s\ndescription: d\nversion: 2", "version", "not a field"),
    ],
)
def test_a_breach_the_specification_tolerates_is_a_warning_and_the_skill_loads(
    tmp_path, front, field, rule
):
    folder = write_skill(tmp_path, "s", front)
    skill, problems = load_skill(str(folder), "user")
    assert skill is not None
    [problem] = [p for p in problems if p.field == field and rule in p.rule]
    assert problem.severity == "warning"
    assert str(folder / "SKILL.md") in str(problem)
    if field == "safe_mode":
        assert skill.safe_mode is True  # the string "false" never opens the gate


@pytest.mark.parametrize(
    ("text", "field", "rule"),
    [
        ("no front matter at all\n", "", "must open with YAML front matter"),
        ("---\nname: s\ndescription: [unclosed\n---\n", "", "not valid YAML"),
        ("---\n- a list\n---\n", "", "mapping of fields"),
        ("---\ndescription: d\n---\n", "name", "is required"),
        ("---\nname: s\ndescription: '  '\n---\n", "description", "is required"),
    ],
)
def test_an_error_keeps_the_skill_out_and_names_file_field_and_rule(tmp_path, text, field, rule):
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "SKILL.md").write_text(text)
    skill, [problem] = load_skill(str(folder), "project")
    assert skill is None
    assert (problem.severity, problem.field) == ("error", field) and rule in problem.rule
    catalog = Catalog.find([(str(tmp_path), "project")])
    with pytest.raises(SkillNotFound, match="no skill named 's'") as caught:
        catalog.get("s")
    assert caught.value.details["errors"]


def test_the_fields_are_read(tmp_path):
    front = """
        name: s
        description: does things
        license: Apache-2.0
        compatibility: needs python3
        metadata: {author: me}
        allowed-tools: Bash(git:*) Read
        safe_mode: false
    """
    skill, problems = load_skill(str(write_skill(tmp_path, "s", front)), "project")
    assert problems == []
    assert skill is not None
    assert (skill.license, skill.compatibility) == ("Apache-2.0", "needs python3")
    assert skill.metadata == {"author": "me"}
    assert skill.allowed_tools == ("Bash(git:*)", "Read")
    assert skill.safe_mode is False and skill.body.strip() == "Use it."


def test_a_project_skill_wins_over_a_user_skill_of_its_name(tmp_path):
    project = write_skill(tmp_path / "project", "s", "name: s\ndescription: project one")
    write_skill(tmp_path / "user", "s", "name: s\ndescription: user one")
    catalog = Catalog.find(
        [(str(tmp_path / "project"), "project"), (str(tmp_path / "user"), "user")]
    )
    assert catalog.get("s").description == "project one"
    assert catalog.get("s").root == str(project)
    [shadow] = catalog.problems
    assert "shadowed" in shadow.rule and str(tmp_path / "user") in shadow.path


def test_the_copy_for_a_run_leaves_out_what_may_be_another_files_content(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("CANARY")
    folder = write_skill(tmp_path / "skills", "s", "name: s\ndescription: d", {"assets/a.txt": "a"})
    (folder / "assets" / "out").symlink_to(secret)
    (folder / "assets" / "in").symlink_to("a.txt")
    os.link(secret, folder / "assets" / "hard")
    skill, _ = load_skill(str(folder), "project")
    assert skill is not None
    into = tmp_path / "copy"
    into.mkdir()
    root, left_out = materialize(skill, str(into))
    copied = Path(root) / "assets"
    assert (copied / "a.txt").read_text() == "a" and (copied / "in").read_text() == "a"
    assert not (copied / "out").exists() and not (copied / "hard").exists()
    assert sorted(left_out) == [
        "assets/hard: a hard link (its content may be any file's)",
        "assets/out: a link that leads outside the skill",
    ]


def test_a_request_from_the_wire_cannot_carry_a_gate_or_a_workspace():
    from stockade.request.wire import from_json

    for key, value in (("gate", '{"verdict": "allow", "reason": "x"}'), ("workspace", '"/"')):
        with pytest.raises(UsageError, match=f"{key} is set by a caller in code"):
            from_json(f'{{"argv": ["true"], "{key}": {value}}}', ExecRequest)


def test_without_stockade_skills_the_command_says_what_to_install():
    import os
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", "from stockade.cli import entry; entry()", "skill", "list"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "STOCKADE_DISABLE_PLUGINS": "skills"},
    )
    assert run.returncode == 125
    assert "error[plugin]: Agent Skills are not installed" in run.stderr
    assert "pip install stockade-skills" in run.stderr


def test_the_cli_does_not_import_skills_until_asked():
    import subprocess
    import sys

    probe = (
        "import sys, stockade.cli; stockade.cli.build_parser(); "
        "print(sorted(m for m in ('stockade_skills', 'yaml') if m in sys.modules))"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"


def test_a_gate_allows_or_denies_and_never_asks():
    from stockade.request.verdict import Decision

    with pytest.raises(ValueError, match="asking a person is the policy's"):
        ExecRequest(["true"], gate=Decision("ask", "why", by="me"))
