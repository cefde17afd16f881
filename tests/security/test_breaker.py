"""The breaker through the API, in each sandbox, with real commands and a live upstream.

A run that holds private data (a canary under a ``private`` glob, a credential, a file an
earlier run marked) and has read somebody else's words (a command's output, a file tool, a
network step) tries to send the canary to a host its profile allows. The upstream counts
every request and keeps every body: an attack passes only when nothing reached it, and the
control beside each attack (the same request from a run that holds only one of the two, or
the opt-out, or the approval) shows that the request does reach it when let through.
"""

from __future__ import annotations

import os

import pytest

from helpers.recording import post
from stockade.config.schema import Config, NetworkConfig
from stockade.errors import PolicyDenied, PolicyHeld
from stockade.record.chain import rows
from stockade.request.spec import Profile


@pytest.fixture
def ws(box):
    (box.ws / "private").mkdir()
    (box.ws / "private" / "notes.txt").write_text(box.canary + "\n")
    (box.ws / "readme.txt").write_text("somebody else's words\n")
    return box.ws


def config(box, port: int, **profile: object) -> Config:
    fields: dict[str, object] = {
        "hosts": (f"allowed.test:{port}",),
        "ask": (),  # the profile would let every network step run
        "workspace": str(box.ws),
        "private": ("private/*",),
    }
    fields.update(profile)
    return Config(
        sandbox=box.sandbox,
        agents={"a": Profile(name="a", **fields)},  # type: ignore[arg-type]
        network=NetworkConfig(resolve={"allowed.test": "127.0.0.1"}),
    )


def run(host, box, argv: list[str], **kw: object):
    """Run ``argv`` as agent ``a``; a step that means to read the private folder is granted it
    (``--read-private``): the grant, not the argv, is what makes its run hold private data."""
    kw.setdefault("read_private", any("private" in arg for arg in argv))
    return host.run(box.request(argv, profile="a", **kw))


def send(port: int, what: str = "@private/notes.txt") -> list[str]:
    """A ``network`` step that posts ``what`` (by default the private notes) upstream."""
    return post(port, what)


def taints(host, run_id: str | None = None) -> list[tuple[str, str, str]]:
    return [
        (row.body["taint"], row.body["source"], row.body["detail"])
        for row in rows(host.store, run_id or host.run_id)
        if row.kind == "taint"
    ]


def test_a_run_holding_both_is_held_before_the_upstream(make_host, box, ws, upstream) -> None:
    host = make_host(config=config(box, upstream.port))
    # Control: somebody else's words alone; the same request reaches the upstream.
    run(host, box, ["cat", "readme.txt"])
    sent = run(host, box, send(upstream.port, "hello"))
    assert (sent.exit_code, sent.stdout.text) == (0, "ok\n"), sent.stderr.text
    assert upstream.seen == [b"/ hello"]
    # The attack: it reads the canary, then posts it.
    read = run(host, box, ["cat", "private/notes.txt"])
    assert read.stdout.text == box.canary + "\n", read.stderr.text
    with pytest.raises(PolicyHeld) as held:
        run(host, box, send(upstream.port))
    assert upstream.seen == [b"/ hello"]  # nothing more reached it
    reason = held.value.message
    assert (
        "the breaker: this run holds private data (grant read-private: private/notes.txt" in reason
    )
    assert reason.endswith("this step names private-path private/notes.txt (private/*)")
    assert "somebody else's words (output step 1: cat readme.txt" in reason
    step = held.value.details["step"]
    waiting = host.store.get(host.run_id, step)
    assert waiting.decision.by == "breaker" and waiting.decision.reason in reason
    # A person lets it go ahead: the same step runs, and now it reaches the upstream.
    host.answer(host.run_id, step, approve=True, by="a person")
    assert host.resume(host.run_id, step).exit_code == 0
    assert upstream.seen[-1] == b"/ " + box.canary.encode() + b"\n"
    found = taints(host)
    assert ("private", "grant", "read-private: private/notes.txt") in found
    assert ("untrusted", "output", "step 1: cat readme.txt") in found
    assert any(source == "network" for _, source, _ in found)


def test_private_data_alone_is_not_held(make_host, box, ws, upstream) -> None:
    host = make_host(config=config(box, upstream.port))
    assert run(host, box, send(upstream.port)).exit_code == 0  # its own first step
    assert upstream.seen == [b"/ " + box.canary.encode() + b"\n"]


def test_a_credential_is_private_data(make_host, box, ws, upstream) -> None:
    env = {**os.environ, "STOCKADE_SECRET_GH": "s3cret-value"}
    host = make_host(config=config(box, upstream.port), environ=env)
    run(host, box, ["cat", "readme.txt"])
    with pytest.raises(PolicyHeld, match=r"credential TOKEN \(handle gh\)"):
        run(host, box, send(upstream.port, "hi"), credentials={"TOKEN": "gh"})
    assert upstream.seen == []
    control = make_host(config=config(box, upstream.port), environ=env)
    assert run(control, box, send(upstream.port, "hi"), credentials={"TOKEN": "gh"}).exit_code == 0
    assert upstream.seen == [b"/ hi"]


@pytest.mark.parametrize("how", ["--yes", "an allow-all policy plugin", "autonomy standard"])
def test_no_autonomy_setting_defeats_it(make_host, box, ws, upstream, how: str) -> None:
    host = make_host(
        config=config(box, upstream.port, autonomy="standard"),
        allow_all=how == "an allow-all policy plugin",
    )
    run(host, box, ["cat", "private/notes.txt"])
    with pytest.raises(PolicyHeld, match="the breaker"):
        run(host, box, send(upstream.port), preapproved=how == "--yes")
    assert upstream.seen == []


def test_a_deny_stays_a_deny(make_host, box, ws, upstream) -> None:
    host = make_host(config=config(box, upstream.port, programs=("cat",)))
    run(host, box, ["cat", "private/notes.txt"])
    with pytest.raises(PolicyDenied, match=r"curl is not in agents\.a\.programs"):
        run(host, box, send(upstream.port))


def test_the_opt_out_lets_it_through_and_still_records(make_host, box, ws, upstream) -> None:
    host = make_host(config=config(box, upstream.port, breaker="off-allow-exfiltration"))
    run(host, box, ["cat", "private/notes.txt"])
    assert run(host, box, send(upstream.port)).exit_code == 0
    assert upstream.seen == [b"/ " + box.canary.encode() + b"\n"]
    assert {taint for taint, _, _ in taints(host)} == {"private", "untrusted"}


def test_the_taint_survives_another_process_taking_up_the_run(make_host, box, ws, upstream) -> None:
    first = make_host(config=config(box, upstream.port))
    run(first, box, ["cat", "private/notes.txt"])
    first.close()  # the server that had it stops
    # A restarted server: a new host, the same run id, nothing in memory.
    again = make_host(config=config(box, upstream.port)).for_run(run_id=first.run_id)
    again.resume_steps()
    with pytest.raises(PolicyHeld, match=r"private-path private/notes\.txt"):
        run(again, box, send(upstream.port))
    assert upstream.seen == []
    fresh = make_host(config=config(box, upstream.port))  # control: a new run is clean
    assert run(fresh, box, send(upstream.port, "hi")).exit_code == 0


def test_a_released_held_step_taints_its_run(make_host, box, ws, upstream) -> None:
    host = make_host(config=config(box, upstream.port))
    with pytest.raises(PolicyHeld):  # a shell is destroys: held whatever the profile says
        run(host, box, ["sh", "-c", 'cat "$0"; cat "$0" > copied.txt', "private/notes.txt"])
    host.answer(host.run_id, 1, approve=True, by="a person")
    make_host(config=config(box, upstream.port)).resume(host.run_id, 1)  # another process
    # What it wrote is marked: its own run held private data, whoever released it.
    assert host.breaker.files().named(os.path.realpath(box.ws), [""]) == ["copied.txt"]
    with pytest.raises(PolicyHeld, match=r"output step 1: sh -c 'cat \"\$0\"; cat"):
        run(host, box, send(upstream.port))
    assert upstream.seen == []


def test_what_a_private_run_writes_stays_private_to_the_next(make_host, box, ws, upstream) -> None:
    first = make_host(config=config(box, upstream.port))
    for folder in ("out", "more", "clean"):  # Landlock: no new file beside a hidden one
        (box.ws / folder).mkdir()
    run(first, box, ["cp", "private/notes.txt", "out/copy.txt"])  # granted, then writes
    run(first, box, ["touch", "more/later.txt"])
    clean = make_host(config=config(box, upstream.port))
    run(clean, box, ["touch", "clean/clean.txt"])  # a run without private data: not marked
    marked = first.breaker.files().named(os.path.realpath(box.ws), [""])
    assert marked == ["more/later.txt", "out/copy.txt"]
    # The next run cannot read the copy (its name says nothing private) unless granted it.
    nxt = make_host(config=config(box, upstream.port))
    assert box.canary not in run(nxt, box, ["cat", "out/copy.txt"]).stdout.text
    assert not [t for t in taints(nxt) if t[0] == "private"]
    granted = run(nxt, box, ["cat", "out/copy.txt"], read_private=True)
    assert granted.stdout.text == box.canary + "\n"
    with pytest.raises(PolicyHeld, match=r"grant read-private: more/later\.txt, out/copy\.txt"):
        run(nxt, box, send(upstream.port, "@out/copy.txt"))
    assert upstream.seen == []
    control = make_host(config=config(box, upstream.port))
    run(control, box, ["cat", "clean/clean.txt"])
    assert run(control, box, send(upstream.port, "@clean/clean.txt")).exit_code == 0
    # A watched delete by a granted step drops the mark.
    run(control, box, ["rm", "out/copy.txt"], preapproved=True, read_private=True)
    assert first.breaker.files().named(os.path.realpath(box.ws), [""]) == ["more/later.txt"]


def test_file_tools_taint_the_run_and_mark_what_it_writes(make_host, box, ws, upstream) -> None:
    from stockade.workspace.files import Workspace

    host = make_host(config=config(box, upstream.port))
    profile = host.config.profile("a")
    with Workspace(str(box.ws)) as files:
        files.file_read("private/notes.txt")
        host.breaker.file_tool("read", str(box.ws), "private/notes.txt", profile)
        files.file_write("summary.txt", b"a summary\n")
        host.breaker.file_tool("write", str(box.ws), "summary.txt", profile)
    found = taints(host)
    assert ("untrusted", "file_read", "private/notes.txt") in found
    assert ("private", "private-path", "private/notes.txt (private/*)") in found
    with pytest.raises(PolicyHeld, match=r"file_read private/notes\.txt"):
        run(host, box, send(upstream.port))
    assert host.breaker.files().named(os.path.realpath(box.ws), ["summary.txt"]) == ["summary.txt"]
    assert upstream.seen == []


def test_taint_events_are_in_the_verified_record(make_host, box, ws, upstream) -> None:
    from stockade.record.verify import verify

    host = make_host(config=config(box, upstream.port))
    run(host, box, ["cat", "private/notes.txt"])
    assert len(taints(host)) == 2
    assert verify(host.store).ok
    assert next(e for e in rows(host.store, host.run_id) if e.kind == "taint").step == 1


def test_a_denied_step_still_counts_what_it_asked_for(make_host, box, ws, upstream) -> None:
    host = make_host(config=config(box, upstream.port, programs=("cat", "curl")))
    with pytest.raises(PolicyDenied):
        run(host, box, ["cp", "private/notes.txt", "x"])
    assert taints(host)[0][:2] == ("private", "grant")
    run(host, box, ["cat", "readme.txt"])
    with pytest.raises(PolicyHeld, match="the breaker"):
        run(host, box, send(upstream.port, "hi"))


def test_a_skill_read_is_somebody_elses_words(make_host, box, ws, upstream) -> None:
    from pathlib import Path

    import attrs

    from stockade.config.schema import SkillsConfig
    from stockade_skills import SkillTool

    examples = Path(__file__).resolve().parents[2] / "skills"
    skills = SkillsConfig(project=(str(examples),), user=())
    cfg = attrs.evolve(config(box, upstream.port), skills=skills)
    control = make_host(config=cfg)
    run(control, box, ["true", "private/notes.txt"])  # private data, nothing printed
    assert run(control, box, send(upstream.port, "hi")).exit_code == 0  # no words: it runs
    host = make_host(config=cfg)
    run(host, box, ["true", "private/notes.txt"])
    assert "unit-convert" in SkillTool(host, profile="a")("unit-convert").text
    with pytest.raises(PolicyHeld, match=r"skill unit-convert: SKILL\.md"):
        run(host, box, send(upstream.port, "hi"))
    assert upstream.seen == [b"/ hi"]


def test_a_credential_the_proxy_injects_is_private_data_too(make_host, box, ws, upstream) -> None:
    from stockade.request.spec import CredentialBinding

    env = {**os.environ, "STOCKADE_SECRET_GH": "s3cret-value"}
    binding = {"gh": CredentialBinding(f"allowed.test:{upstream.port}")}
    host = make_host(config=config(box, upstream.port, credentials=binding), environ=env)
    run(host, box, ["cat", "readme.txt"])
    with pytest.raises(PolicyHeld) as held:
        run(host, box, send(upstream.port, "hi"), credentials={"TOKEN": "gh"})
    assert f"credential TOKEN (handle gh, injected for allowed.test:{upstream.port})" in (
        held.value.message
    )
    assert "s3cret-value" not in held.value.message
    assert upstream.seen == []
