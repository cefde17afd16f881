"""Anthropic sandbox-runtime's ``mandatory-deny-paths.test.ts``, ported case by case.

The peer plants every dangerous file in the working directory (a writable root), then asks
whether a sandboxed ``echo MODIFIED > path`` changes it. Stockade's answer per backend:
both keep those paths read-only while the command runs (the write fails with ``EROFS``):
bubblewrap with read-only binds, Landlock with its supervisor. The file holds ``ORIGINAL``
after.
Our own tests of the same cases, not their code; each names the peer test it ports.
"""

from __future__ import annotations

import json

import pytest

from stockade.config.schema import Config
from stockade.confine import protected
from stockade.request.spec import Profile

from .peers_common import SRT_DENY

ORIGINAL = "ORIGINAL"
GIT_STRICT = "differs: all of .git stays read-only (stricter: objects, refs and index too)"
CLAUDE_STRICT = "differs: all of .claude is protected, not only commands/ and agents/ (stricter)"
NO_GITCONFIG_OPT_OUT = (
    "differs: .git/config has no opt-out (a profile may open dotfiles, never .git)"
)

DANGEROUS = {
    ".bashrc": "blocks writes to .bashrc",
    ".gitconfig": "blocks writes to .gitconfig",
    ".zshrc": "blocks writes to .zshrc",
    ".mcp.json": "blocks writes to .mcp.json",
    ".bash_profile": "blocks writes to .bash_profile",
    ".zprofile": "blocks writes to .zprofile",
    ".profile": "blocks writes to .profile",
    ".gitmodules": "blocks writes to .gitmodules",
    ".ripgreprc": "blocks writes to .ripgreprc",
    ".git/config": "blocks writes to .git/config",
    ".git/hooks/pre-commit": "blocks writes to .git/hooks/pre-commit",
    ".vscode/settings.json": "blocks writes to .vscode/",
    ".claude/commands/test.md": "blocks writes to .claude/commands/",
    ".claude/agents/test-agent.md": "blocks writes to .claude/agents/",
    ".idea/workspace.xml": "blocks writes to .idea/",
}
SAFE = {
    "safe-file.txt": ("allows writes to regular files", "pass", "pass"),
    ".git/objects/test-obj": (
        "allows writes to .git/objects (not hooks/config)",
        GIT_STRICT,
        GIT_STRICT,
    ),
    ".git/refs/heads/main": (
        "allows writes to .git/refs/heads (not hooks/config)",
        GIT_STRICT,
        GIT_STRICT,
    ),
    ".git/index": ("allows writes to .git/index (not hooks/config)", GIT_STRICT, GIT_STRICT),
    ".claude/some-other-file.txt": (
        "allows writes to .claude/ files outside commands/agents",
        CLAUDE_STRICT,
        CLAUDE_STRICT,
    ),
}
PEERS = {
    **{
        f"test_dangerous_path_is_blocked[{path}]": (SRT_DENY, name, "pass", "pass")
        for path, name in DANGEROUS.items()
    },
    **{
        f"test_safe_path_stays_writable[{path}]": (SRT_DENY, name, bwrap, landlock)
        for path, (name, bwrap, landlock) in SAFE.items()
    },
    "test_git_config_blocked_by_default": (
        SRT_DENY,
        "blocks writes to .git/config when allowGitConfig is false (default)",
        "pass",
        "pass",
    ),
    "test_git_config_has_no_opt_out": (
        SRT_DENY,
        "allows writes to .git/config when allowGitConfig is true",
        NO_GITCONFIG_OPT_OUT,
        NO_GITCONFIG_OPT_OUT,
    ),
    "test_git_hooks_blocked_even_with_dotfiles_opened": (
        SRT_DENY,
        "still blocks writes to .git/hooks even when allowGitConfig is true",
        "pass",
        "pass",
    ),
    "test_list_includes_git_config": (
        SRT_DENY,
        "includes .git/config in deny patterns when allowGitConfig is false",
        "pass",
        "pass",
    ),
    "test_list_never_excludes_git_config": (
        SRT_DENY,
        "excludes .git/config from deny patterns when allowGitConfig is true",
        NO_GITCONFIG_OPT_OUT,
        NO_GITCONFIG_OPT_OUT,
    ),
    "test_list_always_includes_git_hooks": (
        SRT_DENY,
        "always includes .git/hooks in deny patterns regardless of allowGitConfig",
        "pass",
        "pass",
    ),
    "test_list_blocks_git_config_by_default": (
        SRT_DENY,
        "defaults to blocking .git/config when no argument provided",
        "pass",
        "pass",
    ),
}

WRITE = """
import json, sys
try:
    with open(sys.argv[1], "w") as f:
        f.write("MODIFIED\\n")
    print(json.dumps("done"))
except OSError as e:
    print(json.dumps(e.strerror))
"""


@pytest.fixture
def planted(box):
    """The peer's layout: every dangerous and every safe path, holding ``ORIGINAL``."""
    for rel in (*DANGEROUS, *SAFE, ".git/HEAD"):
        path = box.ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(ORIGINAL)
    return box


def _write(host, box, rel, **kw):
    result = host.run(box.py(WRITE, rel, **kw))
    assert result.exit_code == 0, result.stderr.text
    return result, json.loads(result.stdout.text)


def _assert_blocked(host, box, rel, **kw):
    result, out = _write(host, box, rel, **kw)
    assert (box.ws / rel).read_text() == ORIGINAL
    assert out == "Read-only file system", out  # a read-only bind, or the supervisor
    assert not result.restored  # refused while it ran: nothing to put back


# mandatory-deny-paths.test.ts: "Dangerous files/directories should be blocked",
# "Git hooks and config should be blocked" (control: safe-file.txt in the same run's layout)
@pytest.mark.parametrize("rel", list(DANGEROUS))
def test_dangerous_path_is_blocked(host, planted, rel):
    _assert_blocked(host, planted, rel)
    _result, out = _write(host, planted, "safe-file.txt")
    assert out == "done" and (planted.ws / "safe-file.txt").read_text() == "MODIFIED\n"


# mandatory-deny-paths.test.ts: "Safe files should still be writable"
@pytest.mark.parametrize("rel", list(SAFE))
def test_safe_path_stays_writable(host, planted, rel):
    if rel == "safe-file.txt" or SAFE[rel][2 if planted.sandbox == "landlock" else 1] == "pass":
        _result, out = _write(host, planted, rel)
        assert out == "done" and (planted.ws / rel).read_text() == "MODIFIED\n"
    else:  # Stockade protects the whole folder: what srt leaves open stays ORIGINAL
        _assert_blocked(host, planted, rel)


# "blocks writes to .git/config when allowGitConfig is false (default)"
def test_git_config_blocked_by_default(host, planted):
    _assert_blocked(host, planted, ".git/config")


def _dotfiles_host(make_host, box):
    agent = Profile(name="dots", ask=(), workspace=str(box.ws), writable_dotfiles=("*",))
    return make_host(allow_all=True, config=Config(sandbox=box.sandbox, agents={"dots": agent}))


# "allows writes to .git/config when allowGitConfig is true": Stockade's nearest opt-out,
# writable_dotfiles = ["*"], opens .gitconfig (the control) and never .git/config
def test_git_config_has_no_opt_out(make_host, planted):
    host = _dotfiles_host(make_host, planted)
    _result, out = _write(host, planted, ".gitconfig", profile="dots")
    assert out == "done" and (planted.ws / ".gitconfig").read_text() == "MODIFIED\n"
    _assert_blocked(host, planted, ".git/config", profile="dots")


# "still blocks writes to .git/hooks even when allowGitConfig is true"
def test_git_hooks_blocked_even_with_dotfiles_opened(make_host, planted):
    host = _dotfiles_host(make_host, planted)
    _assert_blocked(host, planted, ".git/hooks/pre-commit", profile="dots")


# The peer's macGetMandatoryDenyPatterns unit tests, against Stockade's own list
# (stockade.confine.protected), which both backends enforce.
def test_list_includes_git_config(sandbox):
    assert protected.enclosing("/w/.git/config") == "read-only"
    assert protected.enclosing("/w/src/config") is None  # control: a neighbour is not


def test_list_never_excludes_git_config(sandbox):
    assert protected.enclosing("/w/.git/config", protected.opened(["*"])) == "read-only"
    assert protected.enclosing("/w/.gitconfig", protected.opened(["*"])) is None  # control


def test_list_always_includes_git_hooks(sandbox):
    for opened in (frozenset(), protected.opened(["*"])):
        assert protected.enclosing("/w/.git/hooks/pre-commit", opened) == "read-only"


def test_list_blocks_git_config_by_default(sandbox):
    assert protected.enclosing("/w/.git/config") == "read-only"
    assert protected.enclosing("/w/a/b/.git/config") == "read-only"  # at any depth
