"""Policy end to end, in each sandbox: a profile decides, a person approves from another
process, and the class bounds the confinement whatever the classifier said.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from stockade import hookimpl
from stockade.config.load import load_config
from stockade.errors import PolicyDenied, PolicyHeld
from stockade.request.spec import ExecRequest
from stockade.testing import CLI

GIT = "/usr/bin/git"
STOCKADE = [*CLI]  # the native client when the session runs through the server


def git(*args: str, cwd) -> str:
    done = subprocess.run(
        [GIT, *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


@pytest.fixture
def project(box):
    """``ws/remote.git`` (bare) and ``ws/repo``, a clone with one commit not yet pushed."""
    remote, repo = box.ws / "remote.git", box.ws / "repo"
    git("init", "-q", "--bare", "-b", "main", str(remote), cwd=box.ws)
    git("init", "-q", "-b", "main", str(repo), cwd=box.ws)
    for setting in (("user.email", "a@example.com"), ("user.name", "A"), ("safe.directory", "*")):
        git("config", *setting, cwd=repo)
    git("remote", "add", "origin", str(remote), cwd=repo)
    (repo / "f").write_text("hello\n")
    git("add", "f", cwd=repo)
    git("commit", "-q", "-m", "first", cwd=repo)
    config = box.root / "stockade.toml"
    config.write_text(
        f"""
sandbox = "{box.sandbox}"

[store]
path = "{box.root / "state" / "store.db"}"

[agents.ci]
programs = ["git", "ls"]
ask = ["network"]
workspace = "{box.ws}"
"""
    )
    return repo, remote, config


def test_a_profile_runs_holds_and_denies_and_a_person_approves(box, project, make_host):
    repo, remote, config_path = project
    env = {**os.environ, "HOME": str(box.home), "GIT_CONFIG_GLOBAL": "/dev/null"}
    agent = make_host(config=load_config(str(config_path), environ=env), environ=env)

    def request(*argv: str) -> ExecRequest:
        return ExecRequest(argv, str(repo), profile="ci", origin="api", env={"HOME": str(box.home)})

    listed = agent.run(request("ls"))
    assert (listed.exit_code, listed.stdout.text) == (0, "f\n")
    assert (listed.sandbox.provider, listed.sandbox.mode) == (box.sandbox, "read-only")

    with pytest.raises(PolicyHeld) as caught:
        agent.run(request("git", "push", "origin", "main"))
    run, step = caught.value.details["run_id"], caught.value.details["step"]
    assert caught.value.details["kind"] == "network"
    with pytest.raises(subprocess.CalledProcessError):
        git("rev-parse", "main", cwd=remote)  # nothing was pushed while it waits

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*STOCKADE, "--config", str(config_path), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    waiting = json.loads(cli("pending", "--json").stdout)
    assert [(w["run_id"], w["step"], w["argv"]) for w in waiting] == [
        (run, step, ["git", "push", "origin", "main"])
    ]
    approved = cli("approve", run, str(step), "--json")  # a second process: the person
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["sandbox"]["provider"] == box.sandbox
    assert git("rev-parse", "main", cwd=remote) == git("rev-parse", "HEAD", cwd=repo)
    assert json.loads(cli("pending", "--json").stdout) == []
    assert agent.resume(run, step).exit_code == 0  # the agent sees the result it had

    (repo / "g").write_text("keep me\n")
    with pytest.raises(PolicyDenied, match=r"rm is not in agents.ci.programs \(git, ls\)"):
        agent.run(request("rm", "g"))
    with pytest.raises(PolicyDenied, match=r"env is not in agents\.ci\.programs"):
        agent.run(request("env", "ls"))
    assert (repo / "g").exists()


class Liar:
    """A classifier rule that calls ``touch`` a reads command: wrong, on purpose."""

    @hookimpl
    def stockade_classifier_rules(self):
        return {"touch": lambda args: ("reads", "touch only reads (a lie)")}


def test_a_reads_command_cannot_write_the_workspace_even_in_workspace_write(box, make_host):
    host = make_host(plugins=[Liar()])
    request = box.request(["touch", "pwned"], mode="workspace-write")
    result = host.run(request)
    assert result.classification.kind == "reads"
    assert (result.sandbox.mode, result.sandbox.denied) == ("read-only", True)
    assert result.exit_code != 0
    assert not (box.ws / "pwned").exists()
    # The control: the same command, classed as what it is, writes.
    honest = make_host().run(box.request(["touch", "made"], mode="workspace-write"))
    assert (honest.exit_code, honest.sandbox.mode) == (0, "workspace-write")
    assert (box.ws / "made").exists()


def test_approval_never_widens_the_sandbox(box, make_host):
    host = make_host()
    argv = ["rm", "-f", str(box.secret)]
    with pytest.raises(PolicyHeld) as caught:
        host.run(box.request(argv, origin="api"))
    run, step = caught.value.details["run_id"], caught.value.details["step"]
    host.answer(run, step, approve=True, by="test")
    result = host.resume(run, step)
    assert result.exit_code != 0  # outside the workspace: approved, still confined
    assert box.secret.read_text() == box.canary


def test_a_writable_grant_is_asked_for_recorded_and_one_shot(box, make_host, event_log):
    host = make_host(plugins=[event_log])
    target = box.outside / "granted"
    argv = ["touch", str(target)]
    with pytest.raises(PolicyHeld, match="one-shot grant") as caught:
        host.run(box.request(argv, origin="api", grant_writable=[str(box.outside)]))
    assert not target.exists()
    run, step = caught.value.details["run_id"], caught.value.details["step"]
    host.answer(run, step, approve=True, by="alice")
    assert host.resume(run, step).exit_code == 0
    assert target.exists()
    grants = [e for e in event_log.events if e.kind == "grant"]
    assert [(g.writable, g.by) for g in grants] == [((str(box.outside),), "alice")]
    # One shot: the next command, without the grant, cannot write there.
    again = host.run(box.request(["touch", str(box.outside / "again")], origin="api"))
    assert again.exit_code != 0 and not (box.outside / "again").exists()
    # Preapproved by the embedding code: it runs, and the grant is still its own record.
    ahead = box.request(
        ["touch", str(box.outside / "ahead")],
        origin="api",
        preapproved=True,
        grant_writable=[str(box.outside)],
    )
    assert host.run(ahead).exit_code == 0
    assert [e.by for e in event_log.events if e.kind == "grant"] == ["alice", "preapproved"]


def test_a_grant_cannot_open_the_root_or_a_credential_store(box, make_host):
    from stockade.errors import UnsafeRoot

    host = make_host()
    with pytest.raises(UnsafeRoot):
        host.run(box.request(["touch", "/x"], origin="api", preapproved=True, grant_writable=["/"]))
    ssh = box.home / ".ssh"
    ssh.mkdir()
    (ssh / "id_rsa").write_text(box.canary)
    # Neither the home (the command's HOME) nor the store in it may be granted (roots rule).
    for grant in (box.home, ssh):
        with pytest.raises(UnsafeRoot):
            host.run(
                box.request(
                    ["cp", str(box.secret), str(ssh / "authorized_keys")],
                    origin="api",
                    preapproved=True,
                    grant_writable=[str(grant)],
                )
            )
    assert not (ssh / "authorized_keys").exists()
    # The control: a grant of a home's subfolder does open that folder.
    (box.home / "notes").mkdir()
    made = host.run(
        box.request(
            ["cp", str(box.secret), str(box.home / "notes" / "copy")],
            origin="api",
            preapproved=True,
            grant_writable=[str(box.home / "notes")],
        )
    )
    assert made.exit_code == 0 and (box.home / "notes" / "copy").read_text() == box.canary
