"""``new-names-refused``: a protected name made anew in a writable root is refused while the
command runs, by every call that makes a name, for every name of the published lists; a
``.git`` the command makes itself is the one exception, and its hooks take only samples.

A refused name never exists, so no program of the person's sees it while the command runs
(checked after the run). The controls are the neighbours written beside them, and ``git
init``, ``add``, ``commit`` and ``branch`` working in a fresh repository.
"""

from __future__ import annotations

import json
import os

import pytest

from stockade.confine.promises import Promise
from stockade.confine.protected import AGENT_CONFIG, RUN_LATER, kind_of
from stockade.confine.stores import CREDENTIAL_STORES
from stockade.conformance.ground import PRELUDE
from stockade.request.literals import DOTFILES

READ_ONLY = "Read-only file system"
MAKE_ALL = (
    r"""
import json, os, socket, sys
names = json.loads(sys.argv[1])
"""
    + PRELUDE
    + r"""os.makedirs("deep/er")
open("plain", "w").write("x")
os.mkdir("plaindir")
for i, rel in enumerate(names):
    os.makedirs(os.path.join("deep/er", os.path.dirname(rel)), exist_ok=True)
    at = os.path.join("deep/er", rel)
    attempt(f"open:{rel}", lambda: open(at, "w").write("PWNED"))
    attempt(f"mkdir:{rel}", lambda: os.mkdir(at))
    attempt(f"symlink:{rel}", lambda: os.symlink("/bin/sh", at))
    attempt(f"link:{rel}", lambda: os.link("plain", at))
    attempt(f"fifo:{rel}", lambda: os.mkfifo(at))
    attempt(f"rename:{rel}", lambda: os.rename("plaindir", at))
    attempt(f"socket:{rel}", lambda: socket.socketpair()[0].bind(at))
    attempt(f"control:{rel}", lambda: open(at + ".bak", "w").write("ok"))
print(json.dumps(out))
"""
)


def _names() -> list[str]:
    """Every name of the lists, but one beneath another (``.ssh/authorized_keys``: making
    ``.ssh`` is the attack on it)."""
    listed = {*AGENT_CONFIG, *DOTFILES, *RUN_LATER, *CREDENTIAL_STORES}

    def under_another(rel: str) -> bool:
        parts = rel.split("/")
        return any(kind_of("/w/" + "/".join(parts[:i])) for i in range(1, len(parts)))

    return sorted(n for n in listed if not n.startswith("/") and not under_another(n))


@pytest.mark.promise(Promise.NEW_NAMES_REFUSED)
def test_every_new_protected_name_is_refused_by_every_call(host, box):
    names = _names()
    result = host.run(box.py(MAKE_ALL, json.dumps(names)))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text.splitlines()[-1])
    controls = {k: v for k, v in out.items() if k.startswith("control:")}
    assert set(controls.values()) == {"done"}, controls
    made = {k: v for k, v in out.items() if not k.startswith("control:") and v != READ_ONLY}
    assert not made, made
    left = [n for n in names if os.path.lexists(box.ws / "deep/er" / n)]
    assert not left and not result.quarantined, (left, result.quarantined)
    assert (box.ws / "plaindir").is_dir()  # the folder renamed at each name stayed


FRESH = (
    r"""
import json, os, subprocess
"""
    + PRELUDE
    + r"""git = ["git", "-c", "user.name=A", "-c", "user.email=a@example.com", "-C", "repo"]
subprocess.run(["git", "init", "-q", "repo"], check=True)
open("repo/f", "w").write("hello\n")
subprocess.run([*git, "add", "f"], check=True)
subprocess.run([*git, "commit", "-qm", "first"], check=True)
hooks = "repo/.git/hooks"
attempt("hook", lambda: open(f"{hooks}/pre-commit", "w").write("#!/bin/sh\necho PWNED\n"))
attempt("sample_renamed", lambda: os.rename(f"{hooks}/pre-commit.sample", f"{hooks}/pre-commit"))
attempt("sample_linked", lambda: os.link(f"{hooks}/pre-push.sample", f"{hooks}/pre-push"))
attempt("symlink", lambda: os.symlink("/bin/sh", f"{hooks}/post-checkout"))
attempt("subfolder", lambda: os.mkdir(f"{hooks}/d"))
attempt("git_file", lambda: open("other/.git", "w").write("gitdir: ../repo/.git\n"))
attempt("git_symlink", lambda: os.symlink("repo/.git", "linked/.git"))
attempt("git_renamed", lambda: os.rename("plain", "again/.git"))
attempt("control_branch", lambda: subprocess.run([*git, "branch", "b2"], check=True))
print(json.dumps(out))
"""
)


@pytest.mark.promise(Promise.NEW_NAMES_REFUSED)
def test_a_fresh_repository_works_and_its_hooks_take_only_samples(host, box):
    for folder in ("other", "linked", "again", "plain"):
        (box.ws / folder).mkdir()
    result = host.run(box.py(FRESH))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    assert out.pop("control_branch") == "done"
    assert out == dict.fromkeys(out, READ_ONLY), out
    assert result.quarantined == (str(box.ws / "repo" / ".git"),)  # the repository, after
    assert (box.ws / "repo" / "f").read_text() == "hello\n"


BARE = (
    r"""
import json, os, subprocess
"""
    + PRELUDE
    + r"""def write(path, text="#!/bin/sh\necho PWNED\n"):
    return lambda: open(path, "w").write(text)
def swap_hooks(repo):
    def go():
        os.rename(f"{repo}/hooks", f"{repo}/old-hooks")
        os.mkdir("evil")
        open("evil/post-update", "w").write("#!/bin/sh\necho PWNED\n")
        os.rename("evil", f"{repo}/hooks")
    return go
def by_hand(folder, markers, last):
    os.makedirs(f"{folder}/hooks")
    open(f"{folder}/hooks/pre-commit", "w").write("#!/bin/sh\necho PWNED\n")
    open(f"{folder}/HEAD.new", "w").write("ref: refs/heads/main\n")
    for marker in markers:
        os.mkdir(f"{folder}/{marker}")
    return last
subprocess.run(["git", "init", "-q", "--bare", "x.git"], check=True)
attempt("bare_hook", write("x.git/hooks/post-update"))
attempt("bare_sample_renamed", lambda: os.rename("x.git/hooks/update.sample", "x.git/hooks/update"))
attempt("bare_sample_linked", lambda: os.link("x.git/hooks/update.sample", "x.git/hooks/update"))
attempt("bare_hooks_symlink", lambda: os.symlink("/tmp", "x.git/hooks/sub"))
attempt("bare_hooks_swapped", swap_hooks("x.git"))
subprocess.run(["git", "init", "-q", "--bare", "z.git"], check=True)
os.rename("z.git", "y.git")
attempt("bare_renamed", write("y.git/hooks/post-update"))
subprocess.run(["git", "clone", "-q", "--bare", "y.git", "c.git"], check=True)
attempt("clone_bare_hook", write("c.git/hooks/post-update"))
h1 = by_hand("h1", ["objects", "refs"], lambda: os.rename("h1/HEAD.new", "h1/HEAD"))
attempt("completed_by_head_renamed", h1)
h2 = by_hand("h2", ["objects"], lambda: os.mkdir("h2/refs"))
os.rename("h2/HEAD.new", "h2/HEAD")
attempt("completed_by_refs", h2)
h3 = by_hand("h3", [], lambda: open("h3/commondir", "w").write("../y.git\n"))
os.link("h3/HEAD.new", "h3/HEAD")
attempt("completed_by_commondir", h3)
h4 = by_hand("h4", ["refs", "objects"], lambda: os.symlink("refs/heads/main", "h4/HEAD"))
attempt("completed_by_symlink", h4)
os.makedirs("src/hooks")
os.mkdir("src/refs")
os.mkdir("src/objects")
attempt("control_ordinary_hooks", write("src/hooks/useThing.ts", "export {}\n"))
attempt("control_head", write("src/HEAD", "not a ref\n"))  # a repository: src/hooks has a file
git = ["git", "--git-dir=y.git"]
attempt("control_bare_works", lambda: subprocess.run([*git, "symbolic-ref", "HEAD"], check=True))
print(json.dumps(out))
"""
)


@pytest.mark.promise(Promise.NEW_NAMES_REFUSED)
def test_a_repository_under_any_name_is_treated_as_a_fresh_git(host, box):
    """``git init --bare``, ``git clone --bare`` and a repository made by hand (its markers
    ``HEAD``, ``objects`` and ``refs``, or ``commondir``): once a folder is one, its hooks
    take only samples; the name that would make a folder with a live hook one is refused."""
    result = host.run(box.py(BARE))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text.splitlines()[-1])
    assert out.pop("control_ordinary_hooks") == out.pop("control_bare_works") == "done", out
    assert out.pop("control_head") == READ_ONLY, out  # src/ would be a repository with a hook
    assert out == dict.fromkeys(out, READ_ONLY), out
    assert sorted(result.quarantined) == [str(box.ws / r) for r in ("c.git", "x.git", "y.git")]
    for folder in ("h1", "h2", "h3", "h4"):  # never became repositories: their hook is inert
        names = {p.name for p in (box.ws / folder).iterdir()}
        assert not ({"HEAD", "objects", "refs"} <= names or {"HEAD", "commondir"} <= names)
