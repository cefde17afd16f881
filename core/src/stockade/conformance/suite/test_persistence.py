"""Persistence: names another program runs later, whether or not they exist before the run.

A provider that keeps ``protected-read-only`` (bubblewrap) keeps the protected paths that
exist read-only while the command runs; one that does not (Landlock) lets it write them and
the host puts them back after it. Either way, a protected name that
appears anywhere in a writable root is moved out of the workspace into the store's
quarantine once the command has exited, recorded, and named in the result. Each test
plants a canary and has a control: a neighbouring write that must land.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest

from stockade.config.dirs import state_dir
from stockade.config.schema import Config
from stockade.confine.promises import Promise
from stockade.conformance.ground import PRELUDE
from stockade.request.spec import ExecRequest, Profile

ATTEMPT = (
    """
import json, os, sys
"""
    + PRELUDE
    + """def write(path, text="#!/bin/sh\\necho PWNED\\n"):
    def go():
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return go
"""
)


READ_ONLY = "Read-only file system"


def _run(host, box, body, *args, **kw):
    result = host.run(box.py(ATTEMPT + body + "\nprint(json.dumps(out))", *args, **kw))
    assert result.exit_code == 0, result.stderr.text
    return result, json.loads(result.stdout.text)


def _quarantine(result) -> str:
    return os.path.join(state_dir(os.environ), "quarantine", result.action_id)


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


NEW_NAMES = [
    ".vscode/tasks.json",
    ".idea/x",
    ".envrc",
    "sub/dir/.claude/settings.json",
    ".mcp.json",
    "pkg/.cursor/mcp.json",
    ".gemini/settings.json",
    ".devcontainer/devcontainer.json",
    ".bashrc",
    ".gitconfig",
    ".gitmodules",
    "sub/.bashrc",
    "sub/.profile",
    "sub/deep/.gitconfig",
    "sub/.zshenv",
    ".ripgreprc",
    "lib/.cargo/config.toml",
    "newrepo/.aws/config",
]
# Neighbours of the protected names, which must stay writable (the controls).
NEIGHBOURS = ["src/new.txt", "bashrc", ".bashrc.bak", "vscode/tasks.json", ".gitignore"]


def _top(rel: str) -> str:
    """The protected name a relative path runs through (what is quarantined whole)."""
    if rel.endswith(".cargo/config.toml"):  # the file is protected, not the folder
        return rel
    parts = rel.split("/")
    for i in range(len(parts)):
        if parts[i].startswith("."):
            return "/".join(parts[: i + 1])
    return rel


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_protected_names_made_during_the_run_are_quarantined(host, box):
    body = "".join(f"attempt({p!r}, write({p!r}))\n" for p in (*NEW_NAMES, *NEIGHBOURS))
    result, out = _run(host, box, body, env={"X": box.canary})
    assert all(out[p] == "done" for p in NEIGHBOURS), out
    for rel in NEIGHBOURS:
        assert (box.ws / rel).exists(), rel
    if box.keeps(Promise.NEW_NAMES_REFUSED):  # refused while it runs: nothing to quarantine
        assert {p: out[p] for p in NEW_NAMES} == dict.fromkeys(NEW_NAMES, READ_ONLY), out
        assert not result.quarantined
        assert not [p for p in NEW_NAMES if os.path.lexists(box.ws / _top(p))]
        return
    tops = {str(box.ws / _top(rel)) for rel in NEW_NAMES}
    assert set(result.quarantined) == tops, result.quarantined
    for rel in NEW_NAMES:
        assert not (box.ws / rel).exists(), rel
        kept = os.path.join(_quarantine(result), str(box.ws / rel).lstrip("/"))
        with open(kept) as f:
            assert f.read().endswith("PWNED\n"), kept
    assert stat.S_IMODE(os.stat(_quarantine(result)).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.dirname(_quarantine(result))).st_mode) == 0o700


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_the_quarantine_is_recorded(make_host, event_log, box):
    host = make_host(allow_all=True, plugins=[event_log], config=Config(sandbox=box.sandbox))
    result, _ = _run(host, box, "attempt('v', write('sub/.git/description'))")
    [event] = [e for e in event_log.events if e.kind == "quarantine"]
    assert event.action_id == result.action_id
    assert event.quarantined == (str(box.ws / "sub" / ".git"),)
    assert event.folder == _quarantine(result) and not event.failed
    kinds = [e.kind for e in event_log.events if e.action_id == result.action_id]
    assert [k for k in kinds if k != "taint"][-2:] == ["quarantine", "result"]  # the breaker's


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_a_repo_the_command_inits_takes_its_hook_to_quarantine(host, box):
    script = (
        "git init -q newrepo && { printf '#!/bin/sh\\necho PWNED\\n' > "
        "newrepo/.git/hooks/pre-commit && chmod +x newrepo/.git/hooks/pre-commit || "
        "echo REFUSED; } && echo ok > newrepo/file"
    )
    result = host.run(box.request(["sh", "-c", script]))
    assert result.exit_code == 0, result.stderr.text
    assert result.quarantined == (str(box.ws / "newrepo" / ".git"),)
    assert not (box.ws / "newrepo" / ".git").exists()
    assert (box.ws / "newrepo" / "file").read_text() == "ok\n"  # the control
    hook = os.path.join(_quarantine(result), str(box.ws / "newrepo/.git/hooks/pre-commit")[1:])
    sample = hook + ".sample"  # git's own template, kept either way
    assert os.path.exists(sample)
    if box.keeps(Promise.NEW_NAMES_REFUSED):  # a fresh .git's hooks take only *.sample
        assert "REFUSED" in result.stdout.text and not os.path.lexists(hook)
    else:
        assert os.access(hook, os.X_OK)


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_links_symlinks_and_renames_into_protected_names(host, box):
    (box.ws / "evil").write_text(box.canary)
    (box.ws / "evildir").mkdir()
    (box.ws / "evildir" / "tasks.json").write_text(box.canary)
    (box.ws / "evilclaude").mkdir()
    body = """
attempt("hardlink", lambda: os.link("evil", ".envrc"))
attempt("symlink_dir", lambda: os.symlink(sys.argv[1], ".vscode"))
os.makedirs("sub")
attempt("symlink_file", lambda: os.symlink("evil", "sub/.bashrc"))
attempt("rename_dir", lambda: os.rename("evildir", ".idea"))
attempt("rename_deep", lambda: os.renames("evilclaude", "a/b/.claude"))
attempt("rename_file", lambda: os.rename("evil", ".zshrc"))
attempt("control", write("plain/ok.txt"))
"""
    result, out = _run(host, box, body, str(box.outside))
    made = [".envrc", ".vscode", "sub/.bashrc", ".idea", "a/b/.claude", ".zshrc"]
    if box.keeps(Promise.NEW_NAMES_REFUSED):
        assert out.pop("control") == "done"
        assert out == dict.fromkeys(out, READ_ONLY), out
        assert not result.quarantined
        assert not [m for m in made if os.path.lexists(box.ws / m)]
        assert (box.ws / "evil").exists() and (box.ws / "evildir").exists()
        return
    if result.sandbox.writes == "layered":
        # An overlay refuses to rename a folder of the root (EXDEV: ``mv`` copies instead).
        assert out.pop("rename_dir") == out.pop("rename_deep") == "Invalid cross-device link"
        made = [m for m in made if m not in (".idea", "a/b/.claude")]
    assert set(out.values()) == {"done"}, out
    assert sorted(result.quarantined) == sorted(str(box.ws / m) for m in made)
    for name in made:
        assert not os.path.lexists(box.ws / name), name
    assert (box.ws / "plain" / "ok.txt").exists()
    assert (box.outside / "secret.txt").exists()
    assert (box.ws / "evildir").exists() == (result.sandbox.writes == "layered")


def _repo(box):
    _git("init", "-q", cwd=box.ws)
    hooks = box.ws / ".git" / "hooks"
    (hooks / "post-checkout").write_text("#!/bin/sh\necho mine\n")
    (hooks / "post-checkout").chmod(0o755)
    return {
        p: (p.read_bytes(), p.stat().st_mode)
        for p in (box.ws / ".git").rglob("*")
        if p.is_file() and not p.is_symlink()
    }


ATTACK_GIT = """
attempt("hook", write(".git/hooks/pre-commit"))
attempt("hook_edit", write(".git/hooks/post-checkout"))
attempt("config", lambda: open(".git/config", "a").write("[core]\\n\\tfsmonitor = evil\\n"))
attempt("chmod", lambda: os.chmod(".git/hooks/post-checkout", 0o777))
attempt("link_out", lambda: os.link(".git/config", "cfg"))
attempt("through_link", lambda: open("cfg", "a").write("[alias]\\n\\tst = !evil\\n"))
attempt("control_root", write("newfile"))
attempt("control_dir", write("src/new.py"))
"""


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_an_existing_git_is_kept_or_put_back(host, box):
    before = _repo(box)
    result, out = _run(host, box, ATTACK_GIT)
    assert out["control_root"] == "done" and out["control_dir"] == "done"  # a repo root
    assert (box.ws / "newfile").exists() and (box.ws / "src" / "new.py").exists()
    if box.keeps(Promise.PROTECTED_READ_ONLY):
        assert all(out[k] != "done" for k in ("hook", "hook_edit", "config", "link_out")), out
        assert not result.restored
    else:
        assert out["hook"] == out["config"] == out["through_link"] == "done", out
        assert result.restored == (str(box.ws / ".git"),)
        assert str(box.ws / ".git" / "hooks" / "pre-commit") in result.quarantined
    after = {p: (p.read_bytes(), p.stat().st_mode) for p in before}
    assert after == before
    assert not (box.ws / ".git" / "hooks" / "pre-commit").exists()
    assert b"evil" not in (box.ws / ".git" / "config").read_bytes()


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_a_git_renamed_away_and_replaced_is_put_back(host, box):
    before = _repo(box)
    body = """
attempt("rename", lambda: os.rename(".git", "old-git"))
attempt("plant", write(".git/hooks/pre-commit"))
attempt("config", write(".git/config", "[core]\\n\\thooksPath = /tmp\\n"))
attempt("head", write(".git/HEAD", "ref: refs/heads/main\\n"))
"""
    result, out = _run(host, box, body)
    if box.keeps(Promise.PROTECTED_READ_ONLY):
        assert out["rename"] != "done" and out["plant"] != "done", out
    else:
        assert out["rename"] == "done" and out["plant"] == "done", out
        assert result.restored == (str(box.ws / ".git"),)
    after = {p: (p.read_bytes(), p.stat().st_mode) for p in before}
    assert after == before
    assert not (box.ws / ".git" / "hooks" / "pre-commit").exists()


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_existing_agent_config_and_dotfiles_are_kept_or_put_back(host, box):
    originals = {".vscode/tasks.json": "{}", ".bashrc": "# mine\n", "sub/.gitconfig": "[user]\n"}
    for rel, text in originals.items():
        (box.ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (box.ws / rel).write_text(text)
    body = "".join(f"attempt({r!r}, write({r!r}))\n" for r in originals)
    body += "attempt('new_in_vscode', write('.vscode/launch.json'))\n"
    body += "attempt('control', write('sub/notes'))\n"
    result, out = _run(host, box, body)
    assert out["control"] == "done"
    if box.keeps(Promise.PROTECTED_READ_ONLY):
        assert all(v != "done" for k, v in out.items() if k != "control"), out
    else:
        assert all(v == "done" for v in out.values()), out
        assert len(result.restored) == 3
    for rel, text in originals.items():
        assert (box.ws / rel).read_text() == text
    assert not (box.ws / ".vscode" / "launch.json").exists()


@pytest.mark.promise(Promise.CREDENTIAL_STORES)
def test_credential_stores_in_a_writable_root_are_masked(host, box):
    for rel in (".aws/config", "deploy/.ssh/id_rsa", ".netrc", "cfg/.config/gh/hosts.yml"):
        (box.ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (box.ws / rel).write_text(box.canary)
    (box.ws / "aws").mkdir()
    (box.ws / "aws" / "config").write_text("CONTROL-visible")
    body = """
for rel in (".aws/config", "deploy/.ssh/id_rsa", ".netrc", "cfg/.config/gh/hosts.yml",
            "aws/config"):
    try:
        out["read " + rel] = open(rel).read()
    except OSError as e:
        out["read " + rel] = e.strerror
attempt("write", write(".aws/credentials"))
attempt("append", lambda: open(".aws/config", "a").write("x"))
"""
    result, out = _run(host, box, body)
    assert out.pop("read aws/config") == "CONTROL-visible"
    assert box.canary not in json.dumps(out)
    assert out["write"] != "done" and out["append"] != "done", out
    assert (box.ws / ".aws" / "config").read_text() == box.canary
    assert not (box.ws / ".aws" / "credentials").exists()
    assert not result.quarantined


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_a_root_at_a_homes_config_keeps_autostart_and_user_units(host, box):
    config = box.home / ".config"
    (config / "autostart").mkdir(parents=True)
    (config / "autostart" / "mine.desktop").write_text("[Desktop Entry]\n")
    request = ExecRequest(
        [
            "sh",
            "-c",
            "mkdir -p systemd/user environment.d other; echo evil > systemd/user/x.service; "
            "echo evil > autostart/x.desktop; echo evil > environment.d/x.conf; "
            "echo ok > other/x; true",
        ],
        str(config),
        mode="workspace-write",
        sandbox=box.sandbox,
        env={"HOME": str(box.home)},
        timeout=60,
    )
    result = host.run(request)
    assert result.exit_code == 0, result.stderr.text
    assert (config / "other" / "x").read_text() == "ok\n"  # the control
    assert not (config / "systemd" / "user").exists()
    assert not (config / "environment.d").exists()
    assert not (config / "autostart" / "x.desktop").exists()
    assert sorted(os.listdir(config / "autostart")) == ["mine.desktop"]
    if box.keeps(Promise.NEW_NAMES_REFUSED):
        assert "Read-only file system" in result.stderr.text and not result.quarantined
    else:
        assert str(config / "systemd" / "user") in result.quarantined


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_a_profile_may_open_named_dotfiles(make_host, box):
    profile = Profile(writable_dotfiles=(".bashrc",))
    config = Config(sandbox=box.sandbox, agents={"default": profile})
    host = make_host(allow_all=True, config=config)
    result, out = _run(host, box, "attempt('b', write('.bashrc'))\nattempt('z', write('.zshrc'))")
    assert (box.ws / ".bashrc").exists()  # opened
    if box.keeps(Promise.NEW_NAMES_REFUSED):
        assert out == {"b": "done", "z": READ_ONLY}
        assert not result.quarantined and not (box.ws / ".zshrc").exists()
    else:
        assert out == {"b": "done", "z": "done"}
        assert result.quarantined == (str(box.ws / ".zshrc"),)  # not opened


WAIT_THEN = """
import os, sys, time
if sys.argv[1] != "-":
    os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
    try:
        with open(sys.argv[1], "w") as f:
            f.write("#!/bin/sh\\necho PWNED\\n")
        state = "done"
    except OSError as e:
        state = e.strerror
    with open(sys.argv[2], "w") as f:
        f.write(state)
for _ in range(600):
    if os.path.exists(sys.argv[3]):
        break
    time.sleep(0.1)
"""


def _wait_for(condition, what):
    import time

    for _ in range(600):  # a generous cap, not a timing assertion
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting for {what}")


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_a_command_started_after_a_planted_hook_does_not_put_it_back(host, box):
    """A background task writes a hook and waits; a second command starts (the hook is
    there), the task ends (its check removes the hook), then the second one ends: its
    check must restore what was there before the *first* started, not the hook."""
    if box.keeps(Promise.PROTECTED_NEVER_VISIBLE):
        pytest.xfail("a layered command's writes are not in the folder while it runs: no put-back")
    before = _repo(box)
    hook, flag = box.ws / ".git" / "hooks" / "pre-commit", box.ws / "a-wrote"
    first = host.start(box.py(WAIT_THEN, str(hook), str(flag), str(box.ws / "go-a")), owner="t")
    _wait_for(flag.exists, "the first command's write")
    second = host.start(box.py(WAIT_THEN, "-", "-", str(box.ws / "go-b")), owner="t")
    (box.ws / "go-a").write_text("")

    def ended(task):
        return lambda: host.tasks.list("t")[int(task.task_id.split("-")[1]) - 1].status != "running"

    _wait_for(ended(first), "the first command to end")
    assert not hook.exists()
    (box.ws / "go-b").write_text("")
    _wait_for(ended(second), "the second command to end")
    # The control: without read-only protected names the hook did land while it ran.
    if box.keeps(Promise.PROTECTED_READ_ONLY):
        assert box.refused(flag.read_text()), flag.read_text()
    else:
        assert flag.read_text() == "done"
    assert not hook.exists()
    assert {p: (p.read_bytes(), p.stat().st_mode) for p in before} == before


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_a_bare_repository_keeps_its_hooks_and_takes_pushes(host, box):
    """git finds a bare repository from inside it (HEAD, objects, refs): one planted under
    another name is quarantined whole; an existing one keeps hooks and config while a
    push to it still lands (the control)."""
    remote, repo = box.ws / "remote.git", box.ws / "repo"
    _git("init", "-q", "--bare", "-b", "main", str(remote), cwd=box.ws)
    _git("init", "-q", "-b", "main", str(repo), cwd=box.ws)
    (repo / "f").write_text("hello\n")
    _git("add", "f", cwd=repo)
    _git("-c", "user.name=A", "-c", "user.email=a@example.com", "commit", "-qm", "x", cwd=repo)
    config = (remote / "config").read_bytes()
    script = (
        "git -C repo push -q ../remote.git main; "
        "printf '#!/bin/sh\\necho PWNED\\n' > remote.git/hooks/post-receive; "
        "echo '[core] fsmonitor = evil' >> remote.git/config; "
        "git init -q --bare planted.git && echo evil > planted.git/hooks/post-update; "
        "mkdir -p looks/objects looks/refs && echo 'ref: refs/heads/main' > looks/HEAD; "
        "true"
    )
    env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    result = host.run(box.request(["sh", "-c", script], env=env))
    assert result.exit_code == 0, result.stderr.text
    pushed = subprocess.run(
        ["git", "rev-parse", "main"], cwd=remote, capture_output=True, text=True, check=True
    )
    assert pushed.stdout.strip() == _head(repo)  # the control: the push landed
    assert not (remote / "hooks" / "post-receive").exists()
    assert (remote / "config").read_bytes() == config
    assert not (box.ws / "planted.git").exists() and not (box.ws / "looks").exists()
    assert {str(box.ws / "planted.git"), str(box.ws / "looks")} <= set(result.quarantined)


def _head(repo) -> str:
    argv = ["git", "rev-parse", "HEAD"]
    return subprocess.run(argv, cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_a_workspace_made_a_bare_repository_keeps_its_root(host, box):
    (box.ws / "keep.txt").write_text("mine")
    hook = "echo evil > hooks/post-update"
    script = f"git init -q --bare . && {{ {hook} || true; }} && echo ok > other"
    result = host.run(box.request(["sh", "-c", script]))
    assert result.exit_code == 0, result.stderr.text
    if box.keeps(Promise.NEW_NAMES_REFUSED):  # the workspace is a repository: samples only
        assert "Read-only file system" in result.stderr.text, result.stderr.text
    assert box.ws.is_dir() and (box.ws / "keep.txt").read_text() == "mine"  # the control
    assert (box.ws / "other").exists()
    for name in ("HEAD", "objects", "refs", "hooks", "config"):
        assert not (box.ws / name).exists(), name


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_a_protected_file_linked_out_is_not_writable_through_the_link_later(host, box):
    """Run 1 hard-links a hook out to an ordinary name; run 2 writes that name. The hook
    must not change: a protected file with another name is replaced by a copy of its own."""
    before = _repo(box)
    first, out = _run(
        host, box, "attempt('link', lambda: os.link('.git/hooks/post-checkout', 'x'))"
    )
    if box.keeps(Promise.PROTECTED_READ_ONLY):
        assert out["link"] != "done", out  # across the read-only mount: refused
    else:
        assert out["link"] == "done" and str(box.ws / ".git") in first.restored
    _second, out = _run(host, box, "attempt('write', write('x'))")
    assert out["write"] == "done"  # the control: the ordinary name is writable
    assert (box.ws / "x").read_text().endswith("PWNED\n")
    assert {p: (p.read_bytes(), p.stat().st_mode) for p in before} == before


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_a_repositorys_hooks_path_is_kept_like_its_hooks(host, box):
    """``core.hooksPath = .githooks`` makes an ordinary folder the repository's hooks."""
    _repo(box)
    _git("config", "core.hooksPath", ".githooks", cwd=box.ws)
    (box.ws / ".githooks").mkdir()
    (box.ws / ".githooks" / "pre-commit").write_text("#!/bin/sh\necho mine\n")
    body = """
attempt("edit", write(".githooks/pre-commit"))
attempt("add", write(".githooks/post-checkout"))
attempt("control", write("githooks/pre-commit"))
"""
    result, out = _run(host, box, body)
    assert out["control"] == "done"
    if box.keeps(Promise.PROTECTED_READ_ONLY):
        assert out["edit"] != "done" and out["add"] != "done", out
    else:
        assert str(box.ws / ".githooks") in result.restored
    assert (box.ws / ".githooks" / "pre-commit").read_text() == "#!/bin/sh\necho mine\n"
    assert os.listdir(box.ws / ".githooks") == ["pre-commit"]
