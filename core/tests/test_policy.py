"""The built-in policy, agent profiles, held steps and the classifier rules hook."""

from __future__ import annotations

import os
import pty
import sqlite3
import sys
import threading

import attrs
import pytest

from stockade import hookimpl
from stockade.config.load import parse_config
from stockade.config.schema import Config, StoreConfig
from stockade.errors import (
    BadCwd,
    ConfigError,
    PluginError,
    PolicyDenied,
    PolicyHeld,
    RecorderFailed,
    UsageError,
)
from stockade.policy import rules as policy
from stockade.policy.enforce import enforce_class
from stockade.request.spec import Budget, ExecRequest, Profile
from stockade.request.verdict import Classification

FULL = {"mode": "danger-full-access"}


def agents(tmp_path, **profiles: Profile) -> Config:
    named = {name: attrs.evolve(p, name=name) for name, p in profiles.items()}
    # The store sits beside the test's folder: a workspace may not hold it.
    store = tmp_path.with_name(tmp_path.name + "-state") / "store.db"
    return Config(agents=named, store=StoreConfig(str(store)))


def decide(argv, profile: Profile, kind="writes", programs=None, **spec_fields):
    from stockade.policy.resolve import resolve

    spec = resolve(ExecRequest(argv, **FULL), Config(), os.environ)
    spec = attrs.evolve(spec, **spec_fields)
    vote = Classification(kind, ("test",), programs=programs or (argv[0],))
    return policy.stockade_decide(spec, vote, profile)


# --- the rules, in order -----------------------------------------------------------------


def test_each_rule_decides_with_a_reason_naming_it():
    ci = Profile(name="ci", programs=("git", "ls"), budget=Budget(steps=2, duration=60))
    assert decide(["ls"], ci, "reads", step=1).verdict == "allow"
    assert decide(["ls"], ci, "reads", step=1).reason == "reads is not in agents.ci.ask"
    denied = decide(["rm", "x"], ci, "destroys", step=1)
    assert (denied.verdict, denied.reason) == ("deny", "rm is not in agents.ci.programs (git, ls)")
    wrapped = decide(["env", "rm"], ci, "destroys", programs=("env", "rm"), step=1)
    assert wrapped.reason == "env is not in agents.ci.programs (git, ls)"
    spent = decide(["ls"], ci, "reads", step=3)
    assert spent.verdict == "deny"
    assert (
        spent.reason
        == "the run's budget is spent: this is step 3 and agents.ci.budget.steps allows 2"
    )
    late = decide(["ls"], ci, "reads", step=1, run_elapsed=61.0)
    assert "agents.ci.budget.duration allows 60s" in late.reason
    push = decide(["git", "push"], ci, "network", step=1)
    assert (push.verdict, push.reason) == (
        "ask",
        "network is in agents.ci.ask; agents.ci names no hosts, so if approved it runs with "
        "no network (add hosts = [...] to [agents.ci] in the config to let it reach them)",
    )
    reaching = attrs.evolve(ci, hosts=("github.com",))
    push = decide(["git", "push"], reaching, "network", step=1)
    assert (push.verdict, push.reason) == ("ask", "network is in agents.ci.ask")
    allowed = decide(["git", "push"], attrs.evolve(ci, ask=()), "network", step=1)
    assert allowed.verdict == "allow" and "agents.ci names no hosts" in allowed.reason
    reset = decide(["git", "reset", "--hard"], ci, "destroys", step=1)
    assert (reset.verdict, reset.reason) == ("ask", "destroys always waits for a person")


def test_destroys_asks_even_when_ask_is_empty_and_writes_asks_when_listed():
    quiet = Profile(name="quiet", ask=())
    assert decide(["rm", "x"], quiet, "destroys").verdict == "ask"
    assert decide(["curl", "x"], quiet, "network").verdict == "allow"
    careful = Profile(name="careful", ask=("writes", "network"))
    assert decide(["touch", "x"], careful, "writes").verdict == "ask"
    assert decide(["ls"], careful, "reads").verdict == "allow"


def test_a_read_only_agent_gets_only_reads():
    evaluation = Profile(name="eval", autonomy="read-only")
    assert decide(["ls"], evaluation, "reads").verdict == "allow"
    for kind in ("writes", "network", "destroys"):
        decision = decide(["true"], evaluation, kind)
        assert decision.verdict == "deny"
        assert decision.reason == (
            f"agents.eval is read-only (autonomy), and this command is classed {kind}"
        )


def test_a_listed_name_that_resolves_into_the_workspace_is_denied(tmp_path, make_host):
    fake = tmp_path / "git"
    fake.write_text("#!/bin/sh\ntouch pwned\n")
    fake.chmod(0o755)
    config = agents(tmp_path, ci=Profile(programs=("git",), workspace=str(tmp_path)))
    host = make_host(config=config)
    for argv, env in ((["./git"], {}), (["git"], {"PATH": f"{tmp_path}:/usr/bin:/bin"})):
        request = ExecRequest(argv, str(tmp_path), profile="ci", env=env, **FULL)
        with pytest.raises(PolicyDenied, match="inside the workspace"):
            host.run(request)
    assert not (tmp_path / "pwned").exists()


def test_a_program_named_by_a_path_outside_system_dirs_keeps_its_path(tmp_path, make_host):
    elsewhere = tmp_path / "bin"
    elsewhere.mkdir()
    (elsewhere / "ls").write_text("#!/bin/sh\n")
    (elsewhere / "ls").chmod(0o755)
    ws = tmp_path / "ws"
    ws.mkdir()
    host = make_host(config=agents(tmp_path, ci=Profile(programs=("ls",), workspace=str(ws))))
    with pytest.raises(PolicyDenied, match=f"{elsewhere}/ls is not in agents.ci.programs"):
        host.run(ExecRequest([str(elsewhere / "ls")], str(ws), profile="ci", **FULL))
    assert host.run(ExecRequest(["/usr/bin/ls"], str(ws), profile="ci", **FULL)).ok


# --- profiles in the config ----------------------------------------------------------------


def test_profile_tables_parse_and_name_themselves():
    config = parse_config(
        """
        [agents.ci]
        programs = ["git", "ls"]
        ask = ["network", "writes"]
        hosts = ["github.com"]
        timeout = 20
        memory_mb = 256
        autonomy = "read-only"
        budget = { steps = 50, duration = 600 }
        """
    )
    ci = config.profile("ci")
    assert ci == Profile(
        name="ci",
        programs=("git", "ls"),
        ask=("network", "writes"),
        hosts=("github.com",),
        timeout=20.0,
        memory_mb=256,
        autonomy="read-only",
        budget=Budget(steps=50, duration=600.0),
    )
    assert config.profile("default") == Profile()


@pytest.mark.parametrize(
    ("toml", "problem"),
    [
        ('[agents.ci]\nprogams = ["ls"]', "unknown key 'progams' @ $.agents['ci']"),
        ('[agents.ci]\nprograms = "ls"', "expected a list of strings, got str 'ls'"),
        ('[agents.ci]\nask = ["write"]', "invalid value 'write': must be one of 'reads'"),
        ('[agents.ci]\nautonomy = "full"', "invalid value 'full': must be one of 'standard'"),
        ("[agents.ci]\nbudget = { steps = 0 }", "steps must be a whole number >= 1"),
        ('[agents.ci]\nbudget = { steps = "5" }', "expected int, got str '5'"),
        ("[agents.ci]\ntimeout = -1", "timeout must be greater than 0"),
        ('[agents.ci]\nname = "x"', "unknown key 'name' (the table's key is the name)"),
        ('[agents.ci]\nprograms = ["/bin/ls"]', "programs are named bare, without a path"),
        ('[agents.ci]\nworkspace = "ws"', "workspace must be an absolute path"),
        ('[agents."a b"]', "invalid agent name 'a b'"),
        ("[agents]\nci = 3", "@ $.agents['ci']"),
        ('[agents.ci]\nhosts = ["*"]', "'*' allows everything"),
        ('[agents.ci]\nhosts = ["*.com"]', "'com' is a bare top-level domain"),
    ],
)
def test_bad_profiles_are_readable_errors(toml, problem):
    with pytest.raises(ConfigError) as caught:
        parse_config(toml, source="stockade.toml")
    assert problem in caught.value.message
    assert caught.value.message.startswith("invalid config stockade.toml: ")


def test_an_unknown_profile_is_an_error_naming_the_configured_ones(tmp_path, make_host):
    host = make_host(config=agents(tmp_path, ci=Profile()))
    with pytest.raises(ConfigError, match=r"unknown agent profile 'cd'; configured: ci"):
        host.run(ExecRequest(["true"], profile="cd", **FULL))


def test_a_profile_sets_timeout_memory_and_workspace(tmp_path, make_host):
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "sub").mkdir(parents=True)
    outside.mkdir()
    profile = Profile(timeout=7, memory_mb=300, workspace=str(ws))
    host = make_host(config=agents(tmp_path, ci=profile), allow_all=True)
    spec = host.admit(ExecRequest(["pwd"], profile="ci", **FULL)).spec
    assert (spec.cwd, spec.workspace, spec.timeout) == (str(ws), str(ws), 7.0)
    assert spec.limits.memory_mb == 300
    more = host.admit(ExecRequest(["pwd"], str(ws / "sub"), profile="ci", memory_mb=900, **FULL))
    assert (more.spec.cwd, more.spec.workspace) == (str(ws / "sub"), str(ws))
    assert more.spec.limits.memory_mb == 300  # a cap: asking for more gets the profile's
    with pytest.raises(BadCwd, match="outside the workspace of agent 'ci'"):
        host.admit(ExecRequest(["pwd"], str(outside), profile="ci", **FULL))
    (ws / "escape").symlink_to(outside)
    with pytest.raises(BadCwd, match="outside the workspace"):
        host.admit(ExecRequest(["pwd"], str(ws / "escape"), profile="ci", **FULL))


def test_read_only_autonomy_forces_the_read_only_mode(tmp_path, make_host):
    profile = Profile(autonomy="read-only", workspace=str(tmp_path))
    host = make_host(config=agents(tmp_path, ev=profile), allow_all=True)
    from stockade.policy.resolve import resolve

    request = ExecRequest(["true"], str(tmp_path), profile="ev", **FULL)
    assert resolve(request, host.config, os.environ).mode == "read-only"


def test_the_budget_counts_the_steps_of_one_host(tmp_path, make_host):
    host = make_host(config=agents(tmp_path, ci=Profile(budget=Budget(steps=2))))
    assert host.run(ExecRequest(["true"], profile="ci", **FULL)).ok
    with pytest.raises(PolicyHeld):
        host.run(ExecRequest(["rm", "-f", str(tmp_path / "x")], profile="ci", **FULL))
    with pytest.raises(PolicyDenied, match="budget is spent: this is step 3"):
        host.run(ExecRequest(["true"], profile="ci", **FULL))
    fresh = make_host(config=host.config)  # another host is another run
    assert fresh.run(ExecRequest(["true"], profile="ci", **FULL)).ok


# --- the class bounds the confinement ------------------------------------------------------


def test_reads_lose_workspace_write_and_nothing_else_changes(make_host, tmp_path):
    spec = make_host(allow_all=True).admit(ExecRequest(["true"], str(tmp_path), **FULL)).spec
    writable = attrs.evolve(spec, mode="workspace-write")
    for kind, mode in (
        ("reads", "read-only"),
        ("writes", "workspace-write"),
        ("network", "workspace-write"),
        ("destroys", "workspace-write"),
    ):
        assert enforce_class(writable, Classification(kind)).mode == mode
    assert enforce_class(spec, Classification("reads")).mode == "danger-full-access"


# --- held steps ----------------------------------------------------------------------------


def held(host, argv, **kw):
    with pytest.raises(PolicyHeld) as caught:
        host.run(ExecRequest(argv, **{**FULL, **kw}))
    details = caught.value.details
    assert f"stockade approve {details['run_id']} {details['step']}" in str(caught.value.hint)
    return details["run_id"], details["step"]


def test_an_approved_step_runs_exactly_what_was_held_once(tmp_path, make_host):
    target = tmp_path / "doomed"
    target.write_text("x")
    config = agents(tmp_path)
    agent = make_host(config=config)
    run, step = held(agent, ["rm", str(target)], cwd=str(tmp_path), stdin=b"\xff\x00binary")
    assert target.exists()
    with pytest.raises(PolicyHeld, match="still waits for a person"):
        agent.resume(run, step)
    person = make_host(config=config)  # another host, as `stockade approve` is
    [waiting] = person.store.waiting()
    assert (waiting.run_id, waiting.step, waiting.spec.argv) == (run, step, ("rm", str(target)))
    assert waiting.spec.stdin == b"\xff\x00binary"
    person.answer(run, step, approve=True, by="alice")
    with pytest.raises(UsageError, match="already approved by alice"):
        person.answer(run, step, approve=False, by="bob")
    result = person.resume(run, step)
    assert result.ok and not target.exists()
    assert result.decision.by == "alice"
    assert result.decision.reason == "approved: destroys always waits for a person"
    # The agent's host gets the same result back; nothing runs twice.
    target.write_text("again")
    again = agent.resume(run, step)
    assert (again.action_id, again.exit_code) == (result.action_id, 0)
    assert target.exists()
    assert person.store.waiting() == []


def test_a_declined_step_never_runs(tmp_path, make_host):
    target = tmp_path / "kept"
    target.write_text("x")
    host = make_host(config=agents(tmp_path))
    run, step = held(host, ["rm", str(target)])
    host.answer(run, step, approve=False, by="bob")
    with pytest.raises(PolicyDenied, match="declined by bob"):
        host.resume(run, step)
    assert target.exists()


def test_only_one_process_claims_an_approved_step(tmp_path, make_host):
    config = agents(tmp_path)
    first = make_host(config=config)
    run, step = held(first, ["rm", "-f", str(tmp_path / "x")])
    first.answer(run, step, approve=True, by="alice")
    hosts = [make_host(config=config) for _ in range(8)]
    barrier = threading.Barrier(len(hosts))
    claimed = []

    def claim(host):
        barrier.wait()
        claimed.append(host.store.claim(run, step))

    threads = [threading.Thread(target=claim, args=(h,)) for h in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claimed) == [False] * 7 + [True]


def test_held_steps_need_a_store_that_works(tmp_path, make_host):
    blocker = tmp_path / "file"
    blocker.write_text("")
    config = Config(store=StoreConfig(str(blocker / "store.db")))
    with pytest.raises(RecorderFailed, match="cannot open the store"):
        make_host(config=config).run(ExecRequest(["rm", "-f", str(tmp_path / "x")], **FULL))
    path = tmp_path / "newer.db"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
        "INSERT INTO meta VALUES ('schema', '99');"
    )
    db.close()
    newer = Config(store=StoreConfig(str(path)))
    with pytest.raises(RecorderFailed, match="newer than this Stockade knows"):
        make_host(config=newer).run(ExecRequest(["rm", "-f", str(tmp_path / "x")], **FULL))


def test_the_store_is_private(tmp_path, make_host):
    config = Config(store=StoreConfig(str(tmp_path / "state" / "store.db")))
    held(make_host(config=config), ["rm", "-f", str(tmp_path / "x")])
    assert os.stat(tmp_path / "state").st_mode & 0o777 == 0o700
    assert os.stat(tmp_path / "state" / "store.db").st_mode & 0o777 == 0o600


def test_mcp_requests_cannot_approve_themselves(tmp_path, make_host):
    host = make_host(config=agents(tmp_path))
    argv = ["rm", "-f", str(tmp_path / "x")]
    assert host.run(ExecRequest(argv, preapproved=True, origin="api", **FULL)).ok
    with pytest.raises(PolicyHeld):
        host.run(ExecRequest(argv, preapproved=True, origin="mcp", **FULL))


# --- a person at the terminal ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "runs"), [(b"y\n", True), (b"\n", False), (b"yes please\n", False)]
)
def test_the_terminal_prompt_shows_the_command_and_takes_only_yes(tmp_path, answer, runs):
    target = tmp_path / "doomed"
    target.write_text("x")
    pid, fd = pty.fork()
    if pid == 0:  # the child: a person's CLI on a terminal
        os.execve(  # noqa: S606 - argv, no shell: the point of the project
            sys.executable,
            [
                sys.executable,
                "-c",
                "from stockade.cli import entry; entry()",
                "run",
                "--mode",
                "danger-full-access",
                "--",
                "rm",
                str(target),
            ],
            {**os.environ, "STOCKADE_DISABLE_PLUGINS": "bubblewrap,landlock"},
        )
    seen = b""
    while b"approve? [y/N]" not in seen:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            chunk = b""
        assert chunk, seen
        seen += chunk
    os.write(fd, answer)
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    _, status = os.waitpid(pid, 0)
    text = seen.decode()
    assert f"run:    rm {target}" in text
    assert "class:  destroys" in text and "rm is listed as destroys" in text
    assert "asks:   destroys always waits for a person" in text
    assert target.exists() is not runs
    assert os.waitstatus_to_exitcode(status) == (0 if runs else 126)
    if not runs:
        assert "declined at the terminal" in text


# --- the classifier rules hook --------------------------------------------------------------


class Rules:
    def __init__(self, table):
        self.table = table

    @hookimpl
    def stockade_classifier_rules(self):
        return self.table


def test_a_plugin_rule_decides_its_program_but_never_a_shell(make_host, tmp_path):
    table = {
        "mytool": lambda args: (
            ("reads", "mytool status only reads")
            if args[:1] == ["status"]
            else ("network", "mytool syncs")
        ),
        "sh": lambda args: ("reads", "a lie"),
        "python": lambda args: ("reads", "another lie"),
    }
    host = make_host(plugins=[Rules(table)], allow_all=True)
    from stockade.policy.resolve import resolve

    def kind(*argv):
        spec = resolve(ExecRequest(["true"], **FULL), host.config, os.environ)
        return host.classify(attrs.evolve(spec, argv=argv)).kind

    assert kind("mytool", "status") == "reads"
    assert kind("env", "mytool", "sync") == "network"
    assert kind("sh", "-c", "ls *") == "destroys"  # a script not read stays destroys
    assert kind("sh", "-c", "mytool status && mytool sync") == "network"  # its parts: the rule
    assert kind("python", "-c", "1") == "destroys"


def test_two_plugins_with_a_rule_for_one_program_is_an_error(make_host):
    rule = {"mytool": lambda args: ("reads", "x")}
    with pytest.raises(PluginError, match="both add a classifier rule for 'mytool'"):
        make_host(plugins=[Rules(rule), Rules(dict(rule))])


def test_a_grant_names_existing_folders_and_always_asks(tmp_path, make_host):
    with pytest.raises(TypeError, match="not one string"):
        ExecRequest(["true"], grant_writable="/tmp")
    host = make_host(allow_all=True)  # even a policy that allows everything
    with pytest.raises(UsageError, match="which is not a folder"):
        host.run(ExecRequest(["true"], grant_writable=[str(tmp_path / "none")], **FULL))
    with pytest.raises(PolicyHeld, match=f"one-shot grant: {tmp_path} writable"):
        host.run(ExecRequest(["true"], grant_writable=[str(tmp_path)], **FULL))
