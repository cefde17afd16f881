"""File attacks: credential stores, writes outside the workspace, .git and agent config."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from stockade.confine.promises import Promise
from stockade.conformance.ground import PRELUDE
from stockade.errors import SandboxUnavailable

STORES = {
    ".ssh/id_ed25519": "key",
    ".aws/credentials": "aws",
    ".gnupg/private-keys-v1.d/k.key": "gpg",
    ".kube/config": "kube",
    ".docker/config.json": "docker",
    ".netrc": "netrc",
    ".config/gh/hosts.yml": "gh",
    ".config/gcloud/credentials.db": "gcloud",
    ".azure/accessTokens.json": "azure",
    ".npmrc": "npm",
    ".pypirc": "pypi",
    ".git-credentials": "git",
}

READ_ALL = """
import os, sys
seen = []
for top in sys.argv[1:]:
    for d, dirs, files in os.walk(top):
        for f in files:
            try:
                seen.append(open(os.path.join(d, f), errors="replace").read())
            except OSError as e:
                seen.append("ERR " + e.strerror)
print("\\n".join(seen))
"""


@pytest.mark.promise(Promise.CREDENTIAL_STORES)
def test_credential_stores_are_unreadable(host, box, mode):
    for rel in STORES:
        path = box.home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(box.canary)
    (box.home / "notes.txt").write_text("CONTROL-home-is-visible")
    real_aws = box.outside / "aws-real"  # a symlinked store is masked where it points
    real_aws.mkdir()
    (real_aws / "credentials").write_text(box.canary)
    (box.home / ".aws").rename(box.outside / "aws-moved")
    (box.home / ".aws").symlink_to(real_aws)
    result = host.run(box.py(READ_ALL, str(box.home), str(real_aws), mode=mode))
    assert result.exit_code == 0, result.stderr.text
    assert "CONTROL-home-is-visible" in result.stdout.text
    assert box.canary not in result.stdout.text


@pytest.mark.promise(Promise.CREDENTIAL_STORES)
def test_the_real_home_stores_are_masked_too(host, box):
    home = os.path.expanduser("~")
    planted = os.path.join(home, ".ssh", f"stockade-canary-{box.canary}")
    os.makedirs(os.path.dirname(planted), mode=0o700, exist_ok=True)
    try:
        with open(planted, "w") as f:
            f.write(box.canary)
        result = host.run(box.py(READ_ALL, os.path.join(home, ".ssh")))
        assert box.canary not in result.stdout.text
    finally:
        os.unlink(planted)


WRITE_OUTSIDE = """
import os, sys
secret, ws = sys.argv[1], sys.argv[2]
tries = {
    "direct": secret,
    "proc_self_root": "/proc/self/root" + secret,
    "proc_1_root": "/proc/1/root" + secret,
    "symlink": os.path.join(ws, "link"),
    "new_file": os.path.join(os.path.dirname(secret), "planted"),
}
out = {}
try:
    os.symlink(secret, os.path.join(ws, "link"))
except OSError as e:
    out["make_symlink"] = e.strerror  # read-only: the link cannot even be made
for name, path in tries.items():
    try:
        with open(path, "a") as f:
            f.write("PWNED")
        out[name] = "wrote"
    except OSError as e:
        out[name] = e.strerror
try:
    os.link(secret, os.path.join(ws, "hardlink"))
    with open(os.path.join(ws, "hardlink"), "a") as f:
        f.write("PWNED")
    out["hardlink"] = "wrote"
except OSError as e:
    out["hardlink"] = e.strerror
try:
    with open(os.path.join(ws, "control.txt"), "w") as f:
        f.write("ok")
    out["control"] = "wrote"
except OSError as e:
    out["control"] = e.strerror
print(json.dumps(out))
""".replace("import os, sys", "import json, os, sys")


@pytest.mark.promise(Promise.WRITES_CONFINED)
def test_nothing_outside_the_workspace_is_writable(host, box, mode):
    result = host.run(box.py(WRITE_OUTSIDE, str(box.secret), str(box.ws), mode=mode))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    assert box.secret.read_text() == box.canary
    assert not (box.outside / "planted").exists()
    for name in ("direct", "proc_self_root", "proc_1_root", "symlink", "new_file", "hardlink"):
        assert out[name] != "wrote", (name, out)
    if mode == "workspace-write":
        assert out["control"] == "wrote", out
    else:
        assert box.refused(out["control"]), out
    assert result.sandbox.provider == box.sandbox


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


ATTACK_PROTECTED = (
    """
import json, os, shutil, sys
"""
    + PRELUDE
    + """def write(path):
    return lambda: open(path, "w").write("#!/bin/sh\\necho PWNED\\n")
attempt("hook", write(".git/hooks/pre-commit"))
attempt("config", write(".git/config"))
attempt("nested_hook", write("vendor/lib/.git/hooks/post-checkout"))
attempt("gitdir_target_hook", write(".git/modules/sub/hooks/post-checkout"))
attempt("gitdir_file", write("sub/.git"))
attempt("rename_git", lambda: os.rename(".git", ".git-old"))
attempt("rename_nested", lambda: os.rename("vendor/lib/.git", "vendor/lib/.g"))
attempt("remove_nested", lambda: shutil.rmtree("vendor/lib/.git"))
attempt("vscode", write(".vscode/tasks.json"))
attempt("mcp", write(".mcp.json"))
attempt("claude", write(".claude/settings.json"))
attempt("envrc", write(".envrc"))
attempt("deep_config", write("pkg/.idea/workspace.xml"))
attempt("control", write("src/new.txt"))
print(json.dumps(out))
"""
)


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_git_and_agent_config_stay_read_only(host, box):
    ws = box.ws
    _git("init", "-q", cwd=ws)
    (ws / "vendor" / "lib").mkdir(parents=True)
    _git("init", "-q", cwd=ws / "vendor" / "lib")
    (ws / ".git" / "modules" / "sub" / "hooks").mkdir(parents=True)
    (ws / "sub").mkdir()
    (ws / "sub" / ".git").write_text("gitdir: ../.git/modules/sub\n")
    for rel in (
        ".vscode/tasks.json",
        ".mcp.json",
        ".claude/settings.json",
        ".envrc",
        "pkg/.idea/workspace.xml",
    ):
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text("original")
    (ws / "src").mkdir()
    before = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()}
    result = host.run(box.py(ATTACK_PROTECTED))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    assert out.pop("control") == "done"
    if box.keeps(Promise.PROTECTED_READ_ONLY):  # read-only while it runs
        assert all(v != "done" for v in out.values()), out
        assert not result.restored
    else:  # the writes land, and are put back after the run (test_persistence.py)
        assert out["hook"] == "done"
        assert str(ws / ".git") in result.restored
    after = {p: p.read_bytes() for p in before}
    assert after == before
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
    assert (ws / ".git").is_dir() and (ws / "vendor" / "lib" / ".git").is_dir()


@pytest.mark.promise(Promise.PROTECTED_READ_ONLY)
def test_protected_names_are_read_only_while_the_command_runs(host, box):
    """Not merely put back after the run: each write is refused as it is tried."""
    _git("init", "-q", cwd=box.ws)
    (box.ws / ".vscode").mkdir()
    (box.ws / ".vscode" / "tasks.json").write_text("original")
    (box.ws / ".envrc").write_text("original")
    (box.ws / "src").mkdir()
    result = host.run(box.py(ATTACK_PROTECTED))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    assert out["control"] == "done"  # the control: the workspace itself is writable
    for name in ("hook", "config", "vscode", "envrc"):
        assert box.refused(out[name]), (name, out)
    assert out["rename_git"] != "done", out  # (a mount point's rename fails with EBUSY)
    assert not result.restored  # nothing landed, so nothing was put back
    assert (box.ws / ".vscode" / "tasks.json").read_text() == "original"


FLAGS_AND_SOCKETS = (
    r"""
import fcntl, json, os, socket, struct
"""
    + PRELUDE
    + r"""def setflags(path):
    def go():
        fd = os.open(path, os.O_RDONLY)
        fcntl.ioctl(fd, 0x40086602, struct.pack("<i", 0x40))  # FS_IOC_SETFLAGS: nodump
    return go
def fssetxattr(path):
    def go():
        fd, got = os.open(path, os.O_RDONLY), bytearray(28)
        fcntl.ioctl(fd, 0x801C581F, got)  # FS_IOC_FSGETXATTR
        struct.pack_into("<I", got, 0, struct.unpack_from("<I", got)[0] | 0x80)
        fcntl.ioctl(fd, 0x401C5820, bytes(got))  # FS_IOC_FSSETXATTR: nodump
    return go
bind = lambda name: lambda: socket.socketpair()[0].bind(name)
cases = (("", ".git/config", ".git/hooks/pre-commit"), ("control_", "src/a", "src/s"))
for tag, path, name in cases:
    attempt(tag + "setflags", setflags(path))
    attempt(tag + "fssetxattr", fssetxattr(path))
    attempt(tag + "setflags_folder", setflags(os.path.dirname(path)))
    attempt(tag + "bind", bind(name))
print(json.dumps(out))
"""
)


@pytest.mark.promise(Promise.PROTECTED_READ_ONLY)
def test_file_flags_and_socket_names_on_protected_paths_are_refused(host, box):
    """``chattr`` through a descriptor opened for reading (``FS_IOC_SETFLAGS``,
    ``FS_IOC_FSSETXATTR``) and ``bind`` of a Unix socket into ``.git/hooks``: refused as
    they are tried; the same on an ordinary file and name beside them land."""
    _git("init", "-q", cwd=box.ws)
    (box.ws / "src").mkdir()
    (box.ws / "src" / "a").write_text("mine\n")
    result = host.run(box.py(FLAGS_AND_SOCKETS))
    assert result.exit_code == 0, result.stderr.text
    out = json.loads(result.stdout.text)
    controls = {k: out.pop(k) for k in list(out) if k.startswith("control_")}
    assert set(controls.values()) == {"done"}, controls
    assert all(box.refused(v) for v in out.values()), out
    assert not (box.ws / ".git" / "hooks" / "pre-commit").exists()
    assert not result.restored


@pytest.mark.promise(Promise.PROTECTED_NAMES)
@pytest.mark.parametrize("name", [".claude", ".git", ".vscode"])
def test_a_symlinked_protected_path_is_refused(host, box, name):
    (box.ws / name).symlink_to(box.outside)
    with pytest.raises(SandboxUnavailable, match="symlink"):
        host.run(box.py("print('ran')"))


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_a_gitdir_reached_through_a_symlink_is_refused(host, box):
    real = box.ws / "real-gitdir"
    real.mkdir()
    (box.ws / "alias").symlink_to(real)
    (box.ws / "sub").mkdir()
    (box.ws / "sub" / ".git").write_text(f"gitdir: {box.ws / 'alias'}\n")
    with pytest.raises(SandboxUnavailable, match="symlink"):
        host.run(box.py("print('ran')"))


HIDE_AND_PLANT = """
import os, sys
hidden = sys.argv[1]
step = sys.argv[2]
if step == "hide":
    os.chmod(hidden, 0)
    print("hidden")
else:
    os.chmod(hidden, 0o755)
    hook = os.path.join(hidden, "repo", ".git", "hooks", "pre-commit")
    try:
        with open(hook, "w") as f:
            f.write("#!/bin/sh\\necho planted\\n")
        print("planted")
    except OSError as error:
        print("refused", error.strerror)
"""


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_a_directory_hidden_from_the_scan_does_not_unprotect_its_git(host, box):
    """Run 1 takes the read permission off a directory holding a repository: the host's
    look after the run gives it back (to see what is inside), so run 2 still protects the
    ``.git`` there. A directory hidden some other way is refused (as a user; root lists it)."""
    hidden = box.ws / "hidden"
    (hidden / "repo").mkdir(parents=True)
    _git("init", "-q", cwd=hidden / "repo")
    first = host.run(box.py(HIDE_AND_PLANT, str(hidden), "hide"))
    assert first.stdout.text == "hidden\n", first.stderr.text
    if os.getuid() != 0:  # given back after the run (root lists it whatever its mode)
        assert hidden.stat().st_mode & 0o700 == 0o700
    second = host.run(box.py(HIDE_AND_PLANT, str(hidden), "plant"))
    if box.keeps(Promise.PROTECTED_READ_ONLY):
        assert second.stdout.text.startswith("refused"), second.stdout.text
    else:  # it lands, and the .git is put back after the run
        assert str(hidden / "repo" / ".git") in second.restored
    assert not (hidden / "repo" / ".git" / "hooks" / "pre-commit").exists()
    hidden.chmod(0)  # hidden by someone else than a sandboxed command
    try:
        if os.getuid() == 0:  # root lists it anyway: the .git inside is found and protected
            third = host.run(box.py(HIDE_AND_PLANT, str(hidden), "plant"))
            assert third.stdout.text.startswith("refused") or third.restored
        else:
            with pytest.raises(SandboxUnavailable, match="cannot look for protected paths"):
                host.run(box.py(HIDE_AND_PLANT, str(hidden), "plant"))
    finally:
        hidden.chmod(0o755)
    assert not (hidden / "repo" / ".git" / "hooks" / "pre-commit").exists()


@pytest.mark.promise(Promise.PROTECTED_NAMES)
def test_an_unreadable_git_file_is_refused(host, box):
    (box.ws / "sub").mkdir()
    dotgit = box.ws / "sub" / ".git"
    dotgit.write_text("gitdir: ../elsewhere\n")
    dotgit.chmod(0)
    try:
        if os.getuid() == 0:
            pytest.xfail("root reads a file whatever its mode: the case cannot arise")
        with pytest.raises(SandboxUnavailable, match="cannot read"):
            host.run(box.py("print('ran')"))
    finally:
        dotgit.chmod(0o644)


@pytest.mark.promise(Promise.PRIVATE_VIEW)
def test_private_tmp_and_fresh_proc(host, box, tmp_path):
    (tmp_path / "host-tmp-canary").write_text(box.canary)
    source = "import os; print(sorted(os.listdir('/tmp')), len(os.listdir('/run')))"
    result = host.run(box.py(source))
    assert result.stdout.text.strip() == "[] 0"
