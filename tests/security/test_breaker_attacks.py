"""Attacks on the breaker's settings and its limits, in each sandbox (tests/security/test_breaker.py
holds its fixtures: a canary under ``private/*``, a live upstream that keeps every body).

The ways to read a private file without a grant are tests/security/test_private_reads.py: the
taint no longer comes from reading argv, so spelling a path otherwise changes nothing.
"""

from __future__ import annotations

import shutil

import pytest

from stockade.errors import PolicyHeld
from stockade.request.spec import Profile

from .test_breaker import config, run, send, ws

__all__ = ["ws"]  # the fixture, used by name (the upstream is tests/conftest.py's)


def control(make_host, box, port: int, upstream) -> None:
    """The same post from a run that read only somebody else's words: it reaches the upstream."""
    host = make_host(config=config(box, port))
    run(host, box, ["cat", "readme.txt"])
    assert run(host, box, send(port, "hello")).exit_code == 0
    assert upstream.seen[-1] == b"/ hello"


@pytest.mark.parametrize(
    "glob", ["private/", "./private/*", "private//*", "private/../private/*", "/x/../y"]
)
def test_a_glob_that_could_never_match_is_refused(glob: str) -> None:
    """``private/`` or ``./private/*`` would match no path the breaker compares (those are
    normalised): such a profile would protect nothing, silently."""
    with pytest.raises(ValueError, match="normalised") as refused:
        Profile(name="a", private=(glob,))
    assert repr(glob) in str(refused.value)


@pytest.mark.parametrize(
    "name", ["OFF-ALLOW-EXFILTRATION", " off-allow-exfiltration", "off", "off_allow_exfiltration"]
)
def test_the_opt_out_is_one_exact_name(name: str) -> None:
    with pytest.raises(ValueError, match="breaker"):
        Profile(name="a", breaker=name)  # type: ignore[arg-type]


def test_a_program_classed_reads_cannot_reach_the_network(make_host, box, ws, upstream) -> None:
    """curl copied under the name ``cat`` is classed ``reads``: the breaker does not look at
    it, but a step that is not ``network`` gets no egress at all, so it cannot send."""
    shutil.copy("/usr/bin/curl", ws / "cat")
    host = make_host(config=config(box, upstream.port))
    run(host, box, ["cat", "private/notes.txt"])
    disguised = run(host, box, ["./cat", *send(upstream.port, "leak")[1:]])
    assert disguised.exit_code != 0, disguised.stdout.text
    assert upstream.seen == []
    control(make_host, box, upstream.port, upstream)


@pytest.mark.parametrize(
    "line",
    [
        'breaker = "Off-Allow-Exfiltration"',
        'breaker = "off-allow-exfiltration "',
        "breaker = false",
        'breaker = "off"',
        'private = ["private/"]',
    ],
)
def test_a_config_that_would_weaken_it_unsaid_is_refused(line: str) -> None:
    from stockade.config.load import parse_config
    from stockade.errors import ConfigError

    with pytest.raises(ConfigError, match=r"\$\.agents\['a'\]"):
        parse_config(f"[agents.a]\n{line}\n")


@pytest.mark.xfail(
    strict=True,
    reason="taint belongs to a run: what one run printed reaches the agent, which can start "
    "a new run holding nothing and send it from there (docs/breaker.md, limits)",
)
def test_splitting_across_runs_is_held(make_host, box, ws, upstream) -> None:
    reader = make_host(config=config(box, upstream.port))
    read = run(reader, box, ["cat", "private/notes.txt"])
    assert read.stdout.text.strip() == box.canary  # what the agent now holds
    reader.close()
    sender = make_host(config=config(box, upstream.port))  # a new run
    run(sender, box, ["cat", "readme.txt"])
    try:
        with pytest.raises(PolicyHeld, match="the breaker"):
            run(sender, box, send(upstream.port, read.stdout.text.strip()))
    finally:
        assert upstream.seen in ([], [b"/ " + box.canary.encode()])  # the breach, seen
