"""Programs that run programs: classed by what they run, or ``destroys`` when argv cannot
show it (docs/policy.md, "Programs that run programs": one test row per table row)."""

from __future__ import annotations

import pytest

from stockade.policy.classifier import PROGRAM_VARIABLES, classify_argv, stockade_classify
from stockade.request.spec import ExecSpec

ROWS = [
    # ssh, scp, sftp
    (["ssh", "-o", "ProxyCommand=sh -c 'curl x'", "h"], "destroys", "proxycommand"),
    (["ssh", "-oProxyCommand=nc %h %p", "h"], "destroys", "proxycommand"),
    (["ssh", "-o", "LocalCommand id", "-o", "PermitLocalCommand=yes", "h"], "destroys", "local"),
    (["ssh", "-o", "KnownHostsCommand=/bin/x", "h"], "destroys", "knownhostscommand"),
    (["ssh", "-F", "my_config", "h"], "destroys", "-F"),
    (["ssh", "-Fmy_config", "h"], "destroys", "-F"),
    (["scp", "-S", "./prog", "a", "h:b"], "destroys", "-S"),
    (["sftp", "-D", "./server", "h"], "destroys", "-D"),
    (["ssh", "-o", "Port=2222", "h", "ls"], "network", "connects"),
    # git: -c keys, options and subcommands that name programs
    (["git", "-c", "core.sshCommand=sh -c x", "fetch"], "destroys", "-c"),
    (["git", "-c", "core.pager=sh", "log"], "destroys", "-c"),
    (["git", "-c", "core.fsmonitor=./x", "status"], "destroys", "-c"),
    (["git", "--config-env=core.pager=X", "log"], "destroys", "--config-env"),
    (["git", "fetch", "--upload-pack=sh -c x", "origin"], "destroys", "--upload-pack"),
    (["git", "push", "--receive-pack", "x", "origin"], "destroys", "--receive-pack"),
    (["git", "clone", "-u", "x", "url"], "destroys", "-u"),
    (["git", "rebase", "--exec", "make", "main"], "destroys", "--exec"),
    (["git", "difftool", "-x", "x"], "destroys", "-x"),
    (["git", "bisect", "run", "./t"], "destroys", "bisect run"),
    (["git", "submodule", "foreach", "x"], "destroys", "foreach"),
    (["git", "filter-branch", "--tree-filter", "x"], "destroys", "filter-branch"),
    (["git", "add", "-u"], "writes", "git add"),
    # find
    (["find", ".", "-exec", "sh", "-c", 'x "$0"', "{}", ";"], "destroys", "-exec"),
    (["find", ".", "-execdir", "curl", "u", "+"], "network", "-execdir"),
    (["find", ".", "-ok", "rm", "{}", ";"], "destroys", "-ok"),
    # xargs, env, nice, nohup, timeout
    (["xargs", "git"], "destroys", "xargs adds"),
    (["xargs", "-n1", "sh"], "destroys", "xargs adds"),
    (["xargs", "cat"], "reads", "through xargs"),
    (["env", "-S", "sh -c x"], "destroys", "env -S"),
    (["env", "-iS", "sh -c x"], "destroys", "env -S"),
    (["env", "GIT_SSH_COMMAND=sh -c x", "git", "fetch"], "destroys", "GIT_SSH_COMMAND"),
    (["env", "LD_PRELOAD=./x.so", "cat", "a"], "destroys", "LD_PRELOAD"),
    (["env", "A=1", "curl", "u"], "network", "through env"),
    (["nice", "-n", "5", "sh", "x"], "destroys", "through nice"),
    (["nohup", "curl", "u"], "network", "through nohup"),
    (["timeout", "5", "python3", "-c", "x"], "destroys", "through timeout"),
    # tar
    (["tar", "--to-command=sh", "-xf", "a.tar"], "destroys", "--to-command"),
    (["tar", "--use-compress-program", "./x", "-cf", "a", "b"], "destroys", "compress"),
    (["tar", "-I", "./x", "-cf", "a", "b"], "destroys", "-I"),
    (["tar", "--checkpoint-action=exec=sh", "-cf", "a", "b"], "destroys", "checkpoint"),
    (["tar", "-cf", "a.tar", "b"], "writes", "tar makes"),
    # rsync
    (["rsync", "-e", "sh -c x", "a", "h:b"], "destroys", "-e"),
    (["rsync", "--rsh=x", "a", "h:b"], "destroys", "--rsh"),
    (["rsync", "--rsync-path=x", "a", "h:b"], "destroys", "--rsync-path"),
    # curl, wget
    (["curl", "-K", "opts.txt"], "destroys", "-K"),
    (["curl", "--config=opts.txt"], "destroys", "--config"),
    (["wget", "-e", "x=1", "u"], "destroys", "-e"),
    (["curl", "https://x"], "network", "network"),
]


@pytest.mark.parametrize(("argv", "kind", "says"), ROWS, ids=[" ".join(r[0])[:40] for r in ROWS])
def test_each_row(argv: list[str], kind: str, says: str) -> None:
    got, why = classify_argv(argv, path=None)
    assert got == kind, why
    assert says.lower() in why.lower(), why


def spec(argv: list[str], env: dict[str, str]) -> ExecSpec:
    return ExecSpec(
        "a1",
        tuple(argv),
        program="/usr/bin/" + argv[0],
        cwd="/",
        env={"PATH": "/usr/bin:/bin", **env},
        stdin=b"",
        timeout=1,
        kill_grace=1,
        mode="workspace-write",
        sandbox="auto",
        output_limit=1,
    )


@pytest.mark.parametrize("variable", [*sorted(PROGRAM_VARIABLES), "GIT_CONFIG_KEY_0"])
def test_every_variable_that_names_a_program_given_with_env_is_destroys(variable: str) -> None:
    """``--env NAME=...`` reaches the spec's environment: the whole published list is walked."""
    found = stockade_classify(spec(["git", "log"], {variable: "sh -c x"}), {})
    assert found.kind == "destroys" and variable in found.reasons[0]
    control = stockade_classify(spec(["git", "log"], {"LANG": "C"}), {})
    assert control.kind == "reads"


def test_the_pager_stockade_sets_itself_is_not_a_program_given() -> None:
    assert stockade_classify(
        spec(["git", "log"], {"PAGER": "cat", "GIT_PAGER": "cat"}), {}
    ).kind == ("reads")
    assert stockade_classify(spec(["git", "log"], {"PAGER": "less"}), {}).kind == "destroys"
