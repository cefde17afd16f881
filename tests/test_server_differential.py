"""Byte for byte: the same invocation through the warm server and with ``--no-server`` gives
the same output, the same exit status and the same record.

Hypothesis builds invocations of the commands the server runs, from a project folder that
has an ``etc/`` of its own (the issue's ``--cwd etc`` listed the host's ``/etc``): relative
``--cwd``, ``--config``, ``STOCKADE_CONFIG`` and ``--grant-write`` values, good, missing and
invalid, modes the machine cannot confine (the sandboxes are off here: an error), commands
that fail, steps that are held for a person, and the other hot commands with bad arguments
(not ``tasks``, ``read`` and ``kill``: background tasks live in the server only, and
in-process those commands say so).
Each runs through the server, then in-process, in the same folder. What differs by nature is
masked: ids, times and durations, and ``changes`` (the server's kept watch lists what a
command changed; in-process the default profile does not, as the docs say).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.server import FULL, Stockade, stockade_for

_ID = re.compile(rb"\b(?:r?[0-9a-f]{12,})\b")
_TIME = re.compile(rb'"(?:time|duration_ms|started|ended|created)": [0-9.e+-]+')
_VOLATILE = {"action_id", "run_id", "time", "duration_ms", "changes", "started", "created"}


@pytest.fixture(scope="module")
def sk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stockade]:
    with stockade_for(tmp_path_factory.mktemp("differential")) as found:
        project = found.root / "proj"
        for folder in ("sub", "etc", "out"):
            (project / folder).mkdir(parents=True)
        (project / "etc" / "only-in-the-project").write_text("")
        (project / "cfg.toml").write_text("[timeout]\ndefault = 17\n")
        (project / "bad.toml").write_text("[timeout]\ndefualt = 17\n")
        # Relative paths inside a config file are the file's, whoever reads it and wherever.
        (project / "conf").mkdir()
        (project / "conf" / "rel.toml").write_text('[credentials]\nfile = "secrets.toml"\n')
        secrets = project / "conf" / "secrets.toml"
        secrets.write_text('demo = "demo-value-1"\n')
        secrets.chmod(0o600)
        warm = found.run("run", "--yes", "--mode", FULL, "--", "true", cwd=project)
        assert warm.returncode == 0, warm.stderr
        found.wait_server()
        yield found


def _mask(data: bytes) -> bytes:
    try:
        value = json.loads(data)
    except ValueError:
        return _ID.sub(b"<id>", _TIME.sub(b"<time>", data))
    return _ID.sub(b"<id>", json.dumps(_plain(value), sort_keys=True).encode())


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


RUN_OPTIONS = st.fixed_dictionaries(
    {
        "cwd": st.sampled_from([None, "sub", "etc", "./sub/..", "missing"]),
        "config": st.sampled_from(
            [None, "cfg.toml", "bad.toml", "missing.toml", "../proj/cfg.toml", "conf/rel.toml"]
        ),
        "env_config": st.sampled_from([None, "cfg.toml", "bad.toml", "conf/rel.toml"]),
        "secret": st.booleans(),  # resolved from conf/rel.toml's file, else an error
        "grant": st.sampled_from([None, "out", "../proj/out", "missing"]),
        "mode": st.sampled_from([FULL, FULL, "read-only", None]),
        "yes": st.booleans(),
        "json": st.booleans(),
        "program": st.sampled_from(
            [
                ["pwd"],
                ["ls"],
                ["sh", "-c", "echo out; echo err >&2; exit 3"],
                ["touch", "made"],
                ["rm", "-f", "made"],
                ["no-such-program"],
            ]
        ),
    }
)


def _run_argv(o: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    argv: list[str] = []
    if o["config"] is not None:
        argv += ["--config", o["config"]]
    argv.append("run")
    for flag, key in (("--cwd", "cwd"), ("--grant-write", "grant"), ("--mode", "mode")):
        if o[key] is not None:
            argv += [flag, o[key]]
    argv += ["--yes"] * o["yes"] + ["--json"] * o["json"]
    argv += ["--secret", "GIVEN=demo"] * o["secret"]
    env = {} if o["env_config"] is None else {"STOCKADE_CONFIG": o["env_config"]}
    return [*argv, "--", *o["program"]], env


OTHERS = st.sampled_from(
    [
        ["pending"],
        ["pending", "--json"],
        ["decline", "nosuchrun", "1"],
        ["approve", "nosuchrun", "x"],
        ["run"],
        ["run", "--mode", "sideways", "--", "true"],
    ]
)


def _last_step(sk: Stockade) -> list[Any] | None:
    """The last recorded command: its action, and each event of it after, masked."""
    store = sk.state / "stockade" / "store.db"
    with sqlite3.connect(store) as db:
        last = db.execute(
            "SELECT action_id FROM events WHERE kind='action' ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        if last is None:
            return None
        rows = db.execute(
            "SELECT kind, body FROM events WHERE action_id=? ORDER BY seq", (last[0],)
        ).fetchall()
    return [(kind, _plain(json.loads(body))) for kind, body in rows]


@settings(
    max_examples=12,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(invocation=st.one_of(RUN_OPTIONS.map(_run_argv), OTHERS.map(lambda argv: (argv, {}))))
def test_the_server_and_in_process_give_the_same_answer(
    sk: Stockade, invocation: tuple[list[str], dict[str, str]]
) -> None:
    argv, env = invocation
    project = sk.root / "proj"
    answers = []
    for server in (True, False):
        done = sk.run(*argv, server=server, env=env, cwd=project)
        answers.append((done.returncode, _mask(done.stdout), _mask(done.stderr), _last_step(sk)))
    served, local = answers
    assert b"running in-process" not in served[2]  # the server did answer
    assert served[:3] == local[:3], argv
    if served[3] != local[3]:  # the second call recorded a step: the same step
        assert served[3] is not None and local[3] is not None
        assert served[3] == local[3], argv


DEMO_DIGEST = f"{hashlib.sha256(b'demo-value-1').hexdigest()}  -\n".encode()


@pytest.mark.parametrize("how", ["--config", "STOCKADE_CONFIG"])
def test_relative_paths_in_a_config_file_are_the_files(sk: Stockade, how: str) -> None:
    """``credentials.file = "secrets.toml"`` in ``proj/conf/rel.toml`` is
    ``proj/conf/secrets.toml``, through the server (whose own folder is ``/``) and
    in-process, from a folder that is neither (``proj/sub``, the config named from there)."""
    cwd = sk.root / "proj" / "sub"
    config = os.path.relpath(sk.root / "proj" / "conf" / "rel.toml", cwd)
    argv = ["run", "--yes", "--mode", FULL, "--secret", "GIVEN=demo", "--"]
    argv += ["sh", "-c", 'printf %s "$GIVEN" | sha256sum']  # the value itself is refused
    env = {"STOCKADE_CONFIG": config} if how == "STOCKADE_CONFIG" else {}
    prefix = ["--config", config] if how == "--config" else []
    for server in (True, False):
        done = sk.run(*prefix, *argv, server=server, env=env, cwd=cwd)
        assert (done.returncode, done.stdout) == (0, DEMO_DIGEST), (server, done.stderr)
        assert b"running in-process" not in done.stderr


def test_a_config_spelled_two_ways_is_named_as_each_call_spells_it(sk: Stockade) -> None:
    """``--config ../proj/cfg.toml`` and ``STOCKADE_CONFIG=cfg.toml`` (one file, one folder,
    one environment) shared one warm host, whose messages named the file as the first call
    had spelled it: hypothesis met it. Each call's message names the config as that call
    spelled it, as in-process."""
    argv = ["run", "--yes", "--mode", FULL, "--secret", "GIVEN=demo", "--", "true"]
    env = {"STOCKADE_CONFIG": "cfg.toml"}
    for spelling in ("../proj/cfg.toml", "cfg.toml", "../proj/cfg.toml"):
        prefix = ["--config", spelling] if spelling != "cfg.toml" else []
        done = sk.run(*prefix, *argv, server=True, env=env, cwd=sk.root / "proj")
        assert done.returncode == 125, done.stderr
        assert f"in the config {spelling};".encode() in done.stderr, (spelling, done.stderr)
        assert b"running in-process" not in done.stderr
