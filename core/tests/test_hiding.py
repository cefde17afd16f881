"""The one rule every provider answers ``hides`` by, the ``#!`` reader and the argument
scanner: unit tests, fuzzed where the input is a stranger's (a file's first line, argv)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stockade.confine import hiding
from stockade.confine.hiding import Hiding, hidden_arguments, interpreters, refuse_hidden_program
from stockade.confine.provider import SandboxProvider
from stockade.errors import SpawnFailed
from stockade.request.plan import HiddenPath, LaunchPlan, Probe, SandboxFacts
from stockade.request.result import CollectedOutput, ProcessOutcome
from stockade.request.spec import ExecSpec

SIGHT = Hiding(
    [("/tmp", "private"), ("/tmp/ws/.aws", "credential-store"), ("/tmp/d", "deny-read")],
    ["/tmp/ws", "/tmp/ws/.aws/shown"],
)


@pytest.mark.parametrize(
    ("path", "folder"),
    [
        ("/tmp", "/tmp"),
        ("/tmp/x", "/tmp"),
        ("/tmp//x/../y", "/tmp"),
        ("/tmpx/y", None),
        ("/tmp/ws", None),
        ("/tmp/ws/a/b", None),
        ("/tmp/wsx", "/tmp"),
        ("/tmp/ws/.aws/config", "/tmp/ws/.aws"),
        ("/tmp/ws/.aws/shown/x", None),  # shown again beneath
        ("/tmp/d/x", "/tmp"),  # beneath a private folder, deny_read adds nothing
        ("/usr/bin/env", None),
        ("relative/tmp", None),
    ],
)
def test_the_rule(path, folder):
    found = SIGHT.find(path)
    assert (found.folder if found else None) == folder
    if found is not None:
        assert found.path == path


def test_hiding_wins_at_one_path():
    assert Hiding([("/w", "deny-read")], ["/w"]).find("/w/x") == HiddenPath(
        "/w/x", "/w", "deny-read"
    )


def test_a_path_is_hidden_as_it_resolves(tmp_path):
    link = tmp_path / "link"
    link.symlink_to("/hidden-target/prog")
    sight = Hiding([("/hidden-target", "private")])
    assert sight.find(str(link)) == HiddenPath(str(link), "/hidden-target", "private")


@given(st.lists(st.sampled_from(["a", "b", "..", ".", "", "ws"]), max_size=6))
def test_find_never_raises_and_stays_in_its_folder(parts):
    path = "/tmp/" + "/".join(parts)
    found = SIGHT.find(path)
    if found is not None:
        real = os.path.realpath(path)
        assert real == found.folder or real.startswith(found.folder + "/")


def test_reasons_read_plainly():
    assert HiddenPath("/var/tmp/x", "/var/tmp", "private").reason == "private /var/tmp"
    assert HiddenPath("/x", "/d", "deny-read").reason == "deny_read /d"
    assert HiddenPath("/x", "/s", "store").reason == "Stockade's store /s"


def test_interpreters_follow_nested_lines(tmp_path):
    inner = tmp_path / "inner"
    inner.write_text("#!/bin/sh\n")
    outer = tmp_path / "outer"
    outer.write_text(f"#! {inner} -x\nbody\n")
    assert interpreters(str(outer)) == [str(inner), "/bin/sh"]
    (tmp_path / "rel").write_text("#!python3\n")
    assert interpreters(str(tmp_path / "rel")) == []
    assert interpreters(str(tmp_path / "missing")) == []


@given(st.binary(max_size=300))
def test_interpreters_of_any_file(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("shebang") / "f"
    path.write_bytes(data)
    for found in interpreters(str(path)):
        assert os.path.isabs(found) and "\n" not in found


class _Hides(SandboxProvider):
    """A provider that hides ``/hidden``; records what it released."""

    PLUGIN_NAME = "hides-test"
    MODES = frozenset({"read-only"})

    def __init__(self, hidden: str = "/hidden") -> None:
        super().__init__()
        self.hidden = hidden
        self.asked: list[str] = []

    @classmethod
    def probe(cls) -> Probe:
        return Probe(True, "test")

    def confine(self, spec: ExecSpec) -> LaunchPlan:
        return LaunchPlan.from_spec(spec, SandboxFacts(self.PLUGIN_NAME, spec.mode))

    def hides(self, path: str, spec: ExecSpec) -> HiddenPath | None:
        self.asked.append(path)
        return Hiding([(self.hidden, "private")]).find(path)


def _spec(argv, program=None):
    return ExecSpec(
        "a1",
        tuple(argv),
        program=program or argv[0],
        cwd="/",
        env={},
        stdin=b"",
        timeout=1,
        kill_grace=1,
        mode="read-only",
        sandbox="hides-test",
        output_limit=100,
    )


def test_the_default_hides_nothing():
    class Old(_Hides):
        hides = SandboxProvider.hides  # a provider written before the method

    refuse_hidden_program(Old(), _spec(["/hidden/deep/prog"]))  # no refusal


def test_a_hidden_program_is_refused_with_its_grant():
    with pytest.raises(SpawnFailed) as caught:
        refuse_hidden_program(_Hides(), _spec(["/hidden/venv/bin/python3"]))
    error = caught.value
    assert error.exit_status == 126
    assert error.details["grant"] == "/hidden/venv"
    assert "--grant-write /hidden/venv" in (error.hint or "")
    with pytest.raises(SpawnFailed) as caught:
        refuse_hidden_program(_Hides(), _spec(["/hidden/prog"]))
    assert "grant" not in caught.value.details  # never the private folder itself


def _outcome(code):
    empty = CollectedOutput("", False, total_bytes=0, sha256="")
    return ProcessOutcome(
        code, None, timed_out=False, aborted=False, duration=0.1, stdout=empty, stderr=empty
    )


def test_arguments_of_a_failed_run(tmp_path):
    hidden = tmp_path / "h"
    hidden.mkdir()
    (hidden / "x").write_text("x")
    provider = _Hides(str(hidden))
    facts = SandboxFacts("hides-test", "read-only")
    argv = [
        "cp",
        f"{hidden}/x",  # exists
        f"--in={hidden}/new",  # its folder exists: a file to write
        f"{hidden}/no/such",  # neither: not the sandbox's doing
        f"{tmp_path}/shown",
        "rel/h",
        "/proc/self/fd/0",
    ]
    listed = hidden_arguments(provider, _spec(argv, "/bin/cp"), facts, _outcome(1))
    assert listed.denied
    assert [h.path for h in listed.hidden] == [f"{hidden}/x", f"{hidden}/new"]
    assert all(h.folder == str(hidden) for h in listed.hidden)
    assert "/proc/self/fd/0" not in provider.asked and "rel/h" not in provider.asked
    # A run that succeeded keeps its facts as they were.
    assert hidden_arguments(provider, _spec(argv, "/bin/cp"), facts, _outcome(0)) is facts


@given(st.text(max_size=40))
def test_the_argument_scanner_takes_any_text(argument):
    found = hiding._path_in(argument)
    assert found is None or (found.startswith("/") and found in argument)
