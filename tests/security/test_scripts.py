"""A shell script read by its parts runs as its class: the class bounds the sandbox, a part that
destroys still waits, and nothing in the environment slips code past the reader.

Each test runs on both backends, and as root and as the unprivileged user (.ci/run).
"""

from __future__ import annotations

import pytest

from stockade import hookimpl
from stockade.errors import PolicyHeld, UsageError


class _Lie:
    """A plugin rule that calls ``touch`` a reader: the class must still bound the sandbox."""

    @hookimpl
    def stockade_classifier_rules(self):
        return {"touch": lambda args: ("reads", "a rule that lies: touch only reads")}


def test_a_reading_script_runs_read_only_whatever_its_parts_do(make_host, box):
    host = make_host(plugins=[_Lie()])  # the built-in policy: reads and writes are allowed
    result = host.run(box.request(["sh", "-c", "ls; touch pwned"]))
    assert result.classification.kind == "reads", result.classification
    assert result.sandbox.mode == "read-only"
    assert not (box.ws / "pwned").exists(), "a script classed reads wrote in the workspace"
    assert box.refused(result.stderr.text), result.stderr.text
    # The control: the same script, judged by the table alone, writes and does write.
    control = make_host().run(box.request(["sh", "-c", "ls; touch pwned"]))
    assert control.classification.kind == "writes" and control.sandbox.mode == "workspace-write"
    assert (box.ws / "pwned").exists()


def test_a_writing_script_writes_in_its_workspace_only(make_host, box):
    host = make_host()
    result = host.run(box.request(["bash", "-lc", "echo hi > made.txt && cat made.txt"]))
    assert (result.classification.kind, result.exit_code) == ("writes", 0), result.stderr.text
    assert result.stdout.text == "hi\n" and (box.ws / "made.txt").read_text() == "hi\n"
    outside = box.outside / "x"
    with pytest.raises(PolicyHeld):  # a file outside the roots: the script is destroys
        host.run(box.request(["sh", "-c", f"echo hi > {outside}"]))
    assert not outside.exists()


def test_a_destroying_part_makes_the_whole_script_wait(make_host, box):
    (box.ws / "keep.txt").write_text("kept")
    host = make_host()
    for script in ("ls; rm -f keep.txt", "ls && git status || rm keep.txt", "ls | xargs rm"):
        with pytest.raises(PolicyHeld) as held:
            host.run(box.request(["sh", "-c", script]))
        assert held.value.details["kind"] == "destroys"
    assert (box.ws / "keep.txt").read_text() == "kept"


@pytest.mark.parametrize(
    ("env", "prefix"),
    [
        ({"BASH_ENV": "{evil}"}, []),
        ({}, ["env", "BASH_ENV={evil}"]),
        ({}, ["env", "BASH_FUNC_ls%%=() {{ touch {marker}; }}"]),
    ],
    ids=["BASH_ENV", "env BASH_ENV", "env exported function"],
)
def test_the_environment_cannot_run_code_a_read_script_does_not_show(make_host, box, env, prefix):
    marker = box.ws / "ran-hidden-code"
    evil = box.ws / "evil.sh"
    evil.write_text(f"touch {marker}\n")
    fill = {"evil": str(evil), "marker": str(marker)}
    env = {k: v.format(**fill) for k, v in env.items()}
    argv = [*(w.format(**fill) for w in prefix), "bash", "-c", "ls"]
    host = make_host()
    with pytest.raises(PolicyHeld) as held:
        host.run(box.request(argv, env=env))
    assert held.value.details["kind"] == "destroys"
    assert not marker.exists()
    # The control: approved by a person, the hidden code does run, so the test would see it.
    result = host.run(box.request(argv, env=env, preapproved=True))
    assert marker.exists(), (result.stdout.text, result.stderr.text)


def test_an_exported_function_cannot_be_asked_for_by_name(make_host, box):
    with pytest.raises(UsageError, match="invalid environment variable name"):
        make_host().run(box.request(["bash", "-c", "ls"], env={"BASH_FUNC_ls%%": "() { :; }"}))
