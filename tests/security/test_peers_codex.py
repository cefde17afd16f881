"""OpenAI Codex's Linux sandbox tests, ported case by case to ``Host.run``.

Sources: ``codex-rs/linux-sandbox/tests/suite/landlock.rs`` and the policy cases of
``codex-rs/core/tests/suite/exec.rs`` and ``seatbelt.rs`` (written for macOS, but they state
what each mode promises on any platform). Our own tests of the same cases, not their code;
each names the peer test it ports. Codex runs ``bash -lc`` strings; Stockade takes argv, so
a case names its program directly unless the case is about a shell.
"""

from __future__ import annotations

import json
import socket

import pytest

from stockade.conformance.listen import Listener
from stockade.errors import PolicyHeld, SandboxUnavailable

from .peers_common import CODEX_EXEC, CODEX_LANDLOCK, CODEX_SEATBELT

EROFS = "Read-only file system"  # a protected path: bubblewrap's read-only bind, or the supervisor
GRANT = "differs: an extra writable root is a one-shot grant, held until a person approves it"
FULL = "differs: a confining sandbox refuses the mode; it runs only with sandbox 'none'"
PEERS = {
    "test_root_read": (CODEX_LANDLOCK, "test_root_read", "pass", "pass"),
    "test_root_write": (CODEX_LANDLOCK, "test_root_write", "pass", "pass"),
    "test_dev_null_write": (CODEX_LANDLOCK, "test_dev_null_write", "pass", "pass"),
    "test_writable_root": (CODEX_LANDLOCK, "test_writable_root", GRANT, GRANT),
    "test_no_new_privs_is_enabled": (
        CODEX_LANDLOCK,
        "test_no_new_privs_is_enabled",
        "pass",
        "pass",
    ),
    "test_timeout": (CODEX_LANDLOCK, "test_timeout", "pass", "pass"),
    "test_sandbox_blocks_curl": (CODEX_LANDLOCK, "sandbox_blocks_curl", "pass", "pass"),
    "test_sandbox_blocks_wget": (CODEX_LANDLOCK, "sandbox_blocks_wget", "pass", "pass"),
    "test_sandbox_blocks_ping": (CODEX_LANDLOCK, "sandbox_blocks_ping", "pass", "pass"),
    "test_sandbox_blocks_nc": (CODEX_LANDLOCK, "sandbox_blocks_nc", "pass", "pass"),
    "test_sandbox_blocks_git_and_codex_writes_inside_writable_root": (
        CODEX_LANDLOCK,
        "sandbox_blocks_git_and_codex_writes_inside_writable_root",
        "pass",
        "pass",
    ),
    "test_sandbox_blocks_codex_symlink_replacement_attack": (
        CODEX_LANDLOCK,
        "sandbox_blocks_codex_symlink_replacement_attack",
        "differs: the run is refused before it starts (SandboxUnavailable names the symlink)",
        "differs: the run is refused before it starts (SandboxUnavailable names the symlink)",
    ),
    "test_sandbox_blocks_ssh": (CODEX_LANDLOCK, "sandbox_blocks_ssh", "pass", "pass"),
    "test_sandbox_blocks_getent": (CODEX_LANDLOCK, "sandbox_blocks_getent", "pass", "pass"),
    "test_sandbox_blocks_dev_tcp_redirection": (
        CODEX_LANDLOCK,
        "sandbox_blocks_dev_tcp_redirection",
        "pass",
        "pass",
    ),
    "test_exit_code_0_succeeds": (CODEX_EXEC, "exit_code_0_succeeds", "pass", "pass"),
    "test_output_lines_are_kept_whole": (CODEX_EXEC, "truncates_output_lines", "pass", "pass"),
    "test_output_bytes_are_kept_whole": (CODEX_EXEC, "truncates_output_bytes", "pass", "pass"),
    "test_exit_command_not_found_is_ok": (
        CODEX_EXEC,
        "exit_command_not_found_is_ok",
        "pass",
        "pass",
    ),
    "test_write_file_fails_as_sandbox_error": (
        CODEX_EXEC,
        "write_file_fails_as_sandbox_error",
        "pass",
        "pass",
    ),
    "test_if_parent_of_repo_is_writable_then_dot_git_folder_is_writable": (
        CODEX_SEATBELT,
        "if_parent_of_repo_is_writable_then_dot_git_folder_is_writable",
        "differs: .git stays read-only at any depth of a writable root (stricter)",
        "differs: .git stays read-only at any depth of a writable root (stricter)",
    ),
    "test_if_git_repo_is_writable_root_then_dot_git_folder_is_read_only": (
        CODEX_SEATBELT,
        "if_git_repo_is_writable_root_then_dot_git_folder_is_read_only",
        "pass",
        "pass",
    ),
    "test_danger_full_access_allows_all_writes": (
        CODEX_SEATBELT,
        "danger_full_access_allows_all_writes",
        FULL,
        FULL,
    ),
    "test_read_only_forbids_all_writes": (
        CODEX_SEATBELT,
        "read_only_forbids_all_writes",
        "pass",
        "pass",
    ),
    "test_openpty_works": (CODEX_SEATBELT, "openpty_works_under_seatbelt", "pass", "pass"),
}


def _ok(result):
    assert result.exit_code == 0, result.stdout.text + result.stderr.text
    return result


# landlock.rs: test_root_read
def test_root_read(host, box):
    listed = _ok(host.run(box.request(["ls", "-l", "/bin"])))
    assert listed.stdout.text.strip()


# landlock.rs: test_root_write (control: the same write inside the workspace lands)
def test_root_write(host, box):
    target = box.outside / "blah"
    refused = host.run(box.request(["sh", "-c", f"echo blah > {target}"]))
    assert refused.exit_code != 0 and not target.exists()
    assert box.write_refused in refused.stderr.text
    _ok(host.run(box.request(["sh", "-c", "echo blah > inside"])))
    assert (box.ws / "inside").read_text() == "blah\n"


# landlock.rs: test_dev_null_write
def test_dev_null_write(host, box, mode):
    _ok(host.run(box.request(["sh", "-c", "echo blah > /dev/null"], mode=mode)))


# landlock.rs: test_writable_root: an extra writable root is Stockade's one-shot grant
def test_writable_root(host, box):
    extra = box.root / "extra"
    extra.mkdir()
    target = extra / "test"
    refused = host.run(box.request(["sh", "-c", f"echo blah > {target}"]))
    assert refused.exit_code != 0 and not target.exists()  # control: not writable ungranted
    argv = ["sh", "-c", f"echo blah > {target}"]
    with pytest.raises(PolicyHeld, match="one-shot grant"):
        host.run(box.request(argv, grant_writable=(str(extra),)))
    assert not target.exists()
    _ok(host.run(box.request(argv, grant_writable=(str(extra),), preapproved=True)))
    assert target.read_text() == "blah\n"


# landlock.rs: test_no_new_privs_is_enabled
def test_no_new_privs_is_enabled(host, box, mode):
    status = _ok(host.run(box.request(["grep", "^NoNewPrivs:", "/proc/self/status"], mode=mode)))
    assert status.stdout.text == "NoNewPrivs:\t1\n"


# landlock.rs: test_timeout (the peer expects an error; Stockade reports timed_out)
def test_timeout(host, box):
    request = box.request(["sleep", "30"])
    timed = host.run(
        type(request)(request.argv, request.cwd, env=request.env, sandbox=box.sandbox, timeout=0.5)
    )
    assert timed.timed_out and timed.exit_code != 0


def _network_blocked(result) -> None:
    """The peer's rule: exiting 0 means the sandbox was breached."""
    assert result.exit_code != 0, result.stdout.text + result.stderr.text


@pytest.fixture
def upstream():
    from .peers_common import http_upstream

    with http_upstream() as port:
        yield port


# landlock.rs: sandbox_blocks_curl (a live server the host reaches is the control)
def test_sandbox_blocks_curl(host, box, upstream):
    import urllib.request

    assert urllib.request.urlopen(f"http://127.0.0.1:{upstream}/", timeout=10).status == 200
    _network_blocked(host.run(box.request(["curl", "-sS", "-I", f"http://127.0.0.1:{upstream}/"])))
    _network_blocked(host.run(box.request(["curl", "-sS", "-I", "http://openai.com"])))


# landlock.rs: sandbox_blocks_wget
def test_sandbox_blocks_wget(host, box, upstream):
    _network_blocked(
        host.run(
            box.request(
                ["wget", "--tries=1", "--timeout=5", "-qO-", f"http://127.0.0.1:{upstream}/"]
            )
        )
    )
    _network_blocked(
        host.run(box.request(["wget", "--tries=1", "--timeout=5", "-qO-", "http://openai.com"]))
    )


PING = """
import socket
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.sendto(b"\\x08\\x00\\xf7\\xff\\x00\\x00\\x00\\x00", ("127.0.0.1", 0))
    print("SENT")
except OSError as e:
    print("refused", e.strerror)
"""


# landlock.rs: sandbox_blocks_ping (no ping here: the ICMP echo it would send, by hand)
def test_sandbox_blocks_ping(host, box):
    result = host.run(box.py(PING))
    assert result.stdout.text.startswith("refused"), result.stdout.text


NC = """
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5).close()
    print("CONNECTED")
except OSError as e:
    print("refused", e.strerror)
"""


# landlock.rs: sandbox_blocks_nc (no nc here: its zero-length connect, by hand)
def test_sandbox_blocks_nc(host, box):
    listener = Listener(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0))
    try:
        socket.create_connection(listener.address, timeout=5).close()  # control
        result = host.run(box.py(NC, str(listener.address[1])))
        assert result.stdout.text.startswith("refused"), result.stdout.text
    finally:
        listener.close()


# landlock.rs: sandbox_blocks_git_and_codex_writes_inside_writable_root
def test_sandbox_blocks_git_and_codex_writes_inside_writable_root(host, box):
    for folder, name in ((".git", "config"), (".codex", "config.toml")):
        (box.ws / folder).mkdir()
        (box.ws / folder / name).write_text("ORIGINAL")
    for target in (box.ws / ".git" / "config", box.ws / ".codex" / "config.toml"):
        result = host.run(box.request(["sh", "-c", f"echo denied > {target}"]))
        assert target.read_text() == "ORIGINAL"
        assert result.exit_code != 0 and EROFS in result.stderr.text, result.stderr.text
        assert not result.restored
    _ok(host.run(box.request(["sh", "-c", "echo ok > neighbour"])))  # control
    assert (box.ws / "neighbour").read_text() == "ok\n"


# landlock.rs: sandbox_blocks_codex_symlink_replacement_attack
def test_sandbox_blocks_codex_symlink_replacement_attack(host, box):
    decoy = box.ws / "decoy-codex"
    decoy.mkdir()
    (box.ws / ".codex").symlink_to(decoy)
    with pytest.raises(SandboxUnavailable, match="symlink"):
        host.run(box.request(["sh", "-c", f"echo denied > {box.ws / '.codex' / 'config.toml'}"]))
    assert not (decoy / "config.toml").exists()
    (box.ws / ".codex").unlink()  # control: without the symlink the same layout runs
    _ok(host.run(box.request(["true"])))


# landlock.rs: sandbox_blocks_ssh
def test_sandbox_blocks_ssh(host, box):
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=1", "github.com"]
    _network_blocked(host.run(box.request(argv)))


# landlock.rs: sandbox_blocks_getent (localhost still resolves from /etc/hosts: the control)
def test_sandbox_blocks_getent(host, box):
    _network_blocked(host.run(box.request(["getent", "ahosts", "openai.com"])))
    _ok(host.run(box.request(["getent", "hosts", "localhost"])))


# landlock.rs: sandbox_blocks_dev_tcp_redirection (to a live listener the host can reach)
def test_sandbox_blocks_dev_tcp_redirection(host, box):
    listener = Listener(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0))
    try:
        port = listener.address[1]
        result = host.run(box.request(["bash", "-c", f"echo hi > /dev/tcp/127.0.0.1/{port}"]))
        _network_blocked(result)
        assert listener.hits == 0
    finally:
        listener.close()


# exec.rs: exit_code_0_succeeds (read-only, as Codex runs it)
def test_exit_code_0_succeeds(host, box):
    result = _ok(host.run(box.request(["echo", "hello"], mode="read-only")))
    assert (result.stdout.text, result.stderr.text, result.stdout.truncated) == (
        "hello\n",
        "",
        False,
    )


# exec.rs: truncates_output_lines (300 lines come back whole)
def test_output_lines_are_kept_whole(host, box):
    result = _ok(host.run(box.request(["seq", "300"], mode="read-only")))
    assert result.stdout.text == "".join(f"{i}\n" for i in range(1, 301))
    assert not result.stdout.truncated


# exec.rs: truncates_output_bytes (15 lines of 1000 bytes come back whole)
def test_output_bytes_are_kept_whole(host, box):
    source = "import sys\nfor i in range(1, 16): sys.stdout.write(str(i).ljust(1000) + '\\n')"
    result = _ok(host.run(box.py(source, mode="read-only")))
    assert len(result.stdout.text) == 15 * 1001 and not result.stdout.truncated


# exec.rs: exit_command_not_found_is_ok (127 from the shell, not a sandbox denial)
def test_exit_command_not_found_is_ok(host, box):
    result = host.run(
        box.request(["/bin/bash", "-c", "nonexistent_command_12345"], mode="read-only")
    )
    assert result.exit_code == 127 and not result.sandbox.denied


# exec.rs: write_file_fails_as_sandbox_error (read-only: the result says the sandbox denied)
def test_write_file_fails_as_sandbox_error(host, box):
    target = box.ws / "test.txt"
    result = host.run(box.request(["touch", str(target)], mode="read-only"))
    assert result.exit_code != 0 and not target.exists()
    assert result.sandbox.denied, result.sandbox
    _ok(host.run(box.request(["touch", str(target)])))  # control: workspace-write writes it
    assert target.exists()


def _scenario(box):
    repo = box.ws / "repo"
    (repo / ".git").mkdir(parents=True)
    return {
        "outside": box.ws / "outside.txt",
        "repo_root": repo / "repo_file.txt",
        "dot_git": repo / ".git" / "dot_git_file.txt",
    }


TOUCH = """
import json, sys
out = {}
for name, path in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        open(path, "a").close()
        out[name] = "done"
    except OSError as e:
        out[name] = e.strerror
print(json.dumps(out))
"""


def _touch_all(host, box, paths, *, cwd=None, mode="workspace-write", sandbox=None):
    args = [str(x) for pair in paths.items() for x in pair]
    request = box.py(TOUCH, *args, mode=mode)
    if cwd is not None or sandbox is not None:
        request = type(request)(
            request.argv,
            str(cwd or box.ws),
            mode=mode,
            env=request.env,
            sandbox=sandbox or box.sandbox,
            timeout=60,
        )
    result = host.run(request)
    assert result.exit_code == 0, result.stderr.text
    return result, json.loads(result.stdout.text)


# seatbelt.rs: if_parent_of_repo_is_writable_then_dot_git_folder_is_writable
def test_if_parent_of_repo_is_writable_then_dot_git_folder_is_writable(host, box):
    paths = _scenario(box)
    result, out = _touch_all(host, box, paths)
    assert paths["outside"].exists() and paths["repo_root"].exists()  # the controls
    assert not paths["dot_git"].exists()  # Codex lets this through; Stockade never does
    assert out["dot_git"] == EROFS, out
    assert not result.quarantined


# seatbelt.rs: if_git_repo_is_writable_root_then_dot_git_folder_is_read_only
def test_if_git_repo_is_writable_root_then_dot_git_folder_is_read_only(host, box):
    paths = _scenario(box)
    paths["outside"] = box.outside / "outside.txt"
    result, out = _touch_all(host, box, paths, cwd=box.ws / "repo")
    assert out["outside"] == box.write_refused and not paths["outside"].exists()
    assert out["repo_root"] == "done" and paths["repo_root"].exists()
    assert not paths["dot_git"].exists()
    assert out["dot_git"] == EROFS, out
    assert not result.quarantined


# seatbelt.rs: danger_full_access_allows_all_writes (explicit, and only without a sandbox)
def test_danger_full_access_allows_all_writes(host, box):
    paths = _scenario(box)
    paths["outside"] = box.outside / "outside.txt"
    with pytest.raises(SandboxUnavailable, match="cannot enforce mode danger-full-access"):
        _touch_all(host, box, paths, mode="danger-full-access")
    assert not any(p.exists() for p in paths.values())
    _result, out = _touch_all(
        host, box, paths, cwd=box.ws / "repo", mode="danger-full-access", sandbox="none"
    )
    assert set(out.values()) == {"done"} and all(p.exists() for p in paths.values())


# seatbelt.rs: read_only_forbids_all_writes
def test_read_only_forbids_all_writes(host, box):
    paths = _scenario(box)
    _result, out = _touch_all(host, box, paths, mode="read-only")
    assert set(out.values()) == {box.write_refused}, out
    assert not any(p.exists() for p in paths.values())


OPENPTY = """
import os
master, slave = os.openpty()
os.write(slave, b"ping")
assert os.read(master, 4) == b"ping"
print("pty ok")
"""


# seatbelt.rs: openpty_works_under_seatbelt (a pseudo-terminal opens in read-only mode)
def test_openpty_works(host, box):
    result = _ok(host.run(box.py(OPENPTY, mode="read-only")))
    assert result.stdout.text == "pty ok\n"
