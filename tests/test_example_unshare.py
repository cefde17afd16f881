"""The example out-of-tree backend, ``examples/unshare``, installed the way an installer
leaves a distribution (its ``src`` and a ``*.dist-info`` with the ``stockade`` entry point on
the path), confines real commands.

Each attack has its canary and a control: a write outside the workspace and a read of a
planted ``~/.ssh`` key are refused under ``unshare`` and succeed under ``danger-full-access``
(so the test would see a breach); the timeout's ``SIGTERM`` reaches a command that traps it
(it would not if the command were PID 1 of its namespace); nothing it leaves behind lives on.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import uuid
from pathlib import Path

import pytest

from helpers.cli import stockade
from stockade.errors import SpawnFailed
from stockade.request.spec import ExecRequest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "unshare"
UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"


def install_example(site: Path) -> None:
    """What an installer leaves for ``stockade-unshare``, in ``site``: its dist-info, with
    the entry points its ``pyproject.toml`` declares (the file docs/plugins.md shows)."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    name, version = project["name"].replace("-", "_"), project["version"]
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    points = project["entry-points"]["stockade"]
    lines = "".join(f"{key} = {value}\n" for key, value in points.items())
    (info / "entry_points.txt").write_text(f"[stockade]\n{lines}")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "site"
    install_example(folder)
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    monkeypatch.syspath_prepend(str(folder))
    return folder


@pytest.fixture
def host(make_host, site):
    return make_host(allow_all=True)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


def _run(host, argv, cwd, **kw):
    return host.run(ExecRequest(argv, str(cwd), **{"sandbox": "unshare", **kw}))


def test_the_entry_point_registers_a_usable_provider(host):
    assert "unshare" in host.sandboxes.names()
    cls = host.sandboxes.get("unshare")
    probe = host.doer.providers.probe(cls)
    assert probe.usable, probe.detail  # a missing kernel feature is a failure, not a skip
    assert "stockade_unshare" in {p.dist for p in host.hooks.plugin_infos()}


@pytest.fixture
def outside():
    """A folder outside every scratch folder (the sandbox shows it, read-only)."""
    path = Path(os.path.expanduser("~")) / f"stockade-ex26-{uuid.uuid4().hex}"
    path.mkdir()
    yield path
    shutil.rmtree(path)


def test_a_write_outside_the_workspace_is_refused(host, ws, tmp_path, outside):
    canary = outside / "planted"
    done = _run(host, ["touch", str(canary)], ws, mode="workspace-write")
    assert done.exit_code != 0
    assert not canary.exists()
    assert "Read-only file system" in done.stderr.text
    beside = tmp_path / "beside"  # in the host's /tmp: not even there inside
    beside.mkdir()
    hidden = _run(host, ["touch", str(beside / "planted")], ws, mode="workspace-write")
    assert hidden.exit_code != 0
    assert not (beside / "planted").exists()
    assert done.sandbox.provider == "unshare"
    assert done.sandbox.enforcement == "full"
    inside = _run(host, ["touch", "made"], ws, mode="workspace-write")
    assert inside.exit_code == 0, inside.stderr.text
    assert (ws / "made").exists()
    read_only = _run(host, ["touch", "again"], ws, mode="read-only")
    assert read_only.exit_code != 0
    assert not (ws / "again").exists()
    # Control: unconfined, the same write lands (the test sees a breach).
    free = _run(host, ["touch", str(canary)], ws, mode="danger-full-access", sandbox="auto")
    assert free.exit_code == 0
    assert canary.exists()


def test_ssh_keys_are_masked(host, ws, outside):
    home = outside / "home"
    (home / ".ssh").mkdir(parents=True)
    secret = f"KEY-{uuid.uuid4()}"
    (home / ".ssh" / "id_ed25519").write_text(secret)
    (home / "notes").write_text("plain")
    env = {"HOME": str(home)}
    key = str(home / ".ssh" / "id_ed25519")
    done = _run(host, ["cat", key], ws, mode="read-only", env=env)
    assert secret not in done.stdout.text
    assert done.exit_code != 0
    listing = _run(host, ["ls", "-a", str(home / ".ssh")], ws, mode="workspace-write", env=env)
    assert "id_ed25519" not in listing.stdout.text  # not even its name
    plain = _run(host, ["cat", str(home / "notes")], ws, mode="read-only", env=env)
    assert plain.stdout.text == "plain"
    # The user's own ~/.ssh too, when it exists.
    real = Path(os.path.expanduser("~")) / ".ssh"
    if real.is_dir():
        mine = _run(host, ["ls", "-a", str(real)], ws, mode="read-only")
        assert sorted(mine.stdout.text.split()) in ([], [".", ".."])
    free = _run(host, ["cat", key], ws, mode="danger-full-access", sandbox="auto", env=env)
    assert free.stdout.text == secret  # control


def test_the_command_holds_no_capability_and_runs_filtered(host, ws):
    done = _run(host, ["cat", "/proc/self/status"], ws, mode="read-only")
    fields = dict(line.split(":", 1) for line in done.stdout.text.splitlines() if ":" in line)
    for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[name].strip(), 16) == 0, name
    assert fields["NoNewPrivs"].strip() == "1"
    assert fields["Seccomp"].strip() == "2"
    nested = _run(host, ["unshare", "--user", "true"], ws, mode="read-only")
    assert nested.exit_code != 0
    assert "Operation not permitted" in nested.stderr.text
    pids = _run(host, ["ls", "/proc"], ws, mode="read-only").stdout.text.split()
    assert str(os.getpid()) not in pids  # the host's processes are not even listed


def test_sigterm_reaches_the_command_on_timeout(host, ws):
    script = "trap 'echo got-term >> termed; exit 3' TERM; sleep 30 & wait"
    done = _run(host, ["sh", "-c", script], ws, mode="workspace-write", timeout=1)
    assert done.timed_out
    # SIGTERM (not the SIGKILL after the grace), and once: the init forwards no copy
    assert (ws / "termed").read_text() == "got-term\n"
    assert done.exit_code == 3, (done.exit_code, done.signal, done.stderr.text)
    died = _run(host, ["sh", "-c", "kill -TERM $$"], ws, mode="read-only")
    assert (died.exit_code, died.signal) == (143, None)  # 128+N, as bwrap reports it


def test_nothing_outlives_the_command(host, ws):
    tag = f"{uuid.uuid4().int % 10**6}.5"
    done = _run(host, ["sh", "-c", f"sleep {tag} & echo started"], ws, mode="read-only")
    assert done.stdout.text == "started\n"
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if tag.encode() in cmdline and b"sleep" in cmdline:
            left.append(pid)
    assert left == []


def test_a_hidden_program_is_refused(host, ws):
    scratch = Path("/dev/shm") / f"stockade-ex26-{uuid.uuid4().hex}"
    scratch.write_text("#!/bin/sh\necho ran\n")
    scratch.chmod(0o755)
    try:
        with pytest.raises(SpawnFailed, match="which the sandbox hides"):
            _run(host, [str(scratch)], ws, mode="read-only")
    finally:
        scratch.unlink()
    shown = ws / "script"  # control: the same program where the sandbox shows it runs
    shown.write_text("#!/bin/sh\necho ran\n")
    shown.chmod(0o755)
    assert _run(host, [str(shown)], ws, mode="read-only").stdout.text == "ran\n"


CONNECT = (
    "import socket, sys\n"
    "try:\n"
    "    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5).close()\n"
    "    print('connected')\n"
    "except OSError as e:\n"
    "    print('refused', e.errno)\n"
)


def test_a_host_listener_is_out_of_reach(host, ws):
    python = os.path.realpath(sys.executable)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = str(listener.getsockname()[1])
        done = _run(host, [python, "-c", CONNECT, port], ws, mode="workspace-write")
        assert done.stdout.text.startswith("refused"), done.stdout.text + done.stderr.text
        free = _run(
            host, [python, "-c", CONNECT, port], ws, mode="danger-full-access", sandbox="auto"
        )
        assert free.stdout.text == "connected\n"  # control: the listener is live


def test_the_command_line_lists_and_runs_it(site, ws):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(EXAMPLE / "src")])}

    def cli(*args):
        return stockade(*args, cwd=ws, env=env)

    listed = json.loads(cli("plugins", "--json").stdout)
    assert "unshare" in [s["name"] for s in listed["sandboxes"]]
    assert cli("doctor").stdout.count("[ok] unshare:") == 1
    done = cli("run", "--sandbox", "unshare", "--", "cat", "/proc/self/uid_map")
    assert done.returncode == 0, done.stderr
    inner, outer, count = done.stdout.split()
    assert (inner, outer, count) == ("0", str(os.getuid()), "1")  # its own user namespace


def test_its_settings_are_checked(site):
    from stockade_unshare.provider import UnshareSandbox

    from stockade.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown keys"):
        UnshareSandbox({"scan_limt": 5})
    with pytest.raises(ConfigError, match="scan_limit"):
        UnshareSandbox({"scan_limit": True})
    assert UnshareSandbox({"scan_limit": 7}).scan_limit == 7


def test_its_ci_runs_the_kit_on_it_and_its_names_agree(site):
    import yaml
    from stockade_unshare.provider import UnshareSandbox

    workflow = yaml.safe_load(
        (EXAMPLE / ".github" / "workflows" / "conformance.yml").read_text(encoding="utf-8")
    )
    runs = [step.get("run", "") for step in workflow["jobs"]["kit"]["steps"]]
    kit = f"-m stockade.conformance --sandbox {UnshareSandbox.PLUGIN_NAME} "
    assert sum(kit in run for run in runs) == 2  # as a user, and as root
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert list(project["entry-points"]["stockade"]) == [UnshareSandbox.PLUGIN_NAME]


def _signal_state(pid: int) -> tuple[str, int]:
    """A process's state letter and its pending signals (its own and its group's)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return "gone", 0
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    pending = int(fields["SigPnd"].strip(), 16) | int(fields["ShdPnd"].strip(), 16)
    return fields["State"].split()[0], pending


def _first_child(pid: int, name: str) -> int:
    """``pid``'s first child, once it has become ``name`` (unshare's child blocks signals
    until it execs)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    for _ in range(1000):  # waiting for unshare to fork and exec, not a timing assert
        found = children.read_text().split()
        if found and Path(f"/proc/{found[0]}/comm").read_text().strip() == name:
            return int(found[0])
        time.sleep(0.01)
    raise AssertionError(f"unshare never started {name}")


def test_without_an_init_sigterm_to_the_first_process_is_dropped():
    """Why the setup stays as PID 1 (docs/providers.md, "Processes and signals"): the kernel
    drops a SIGTERM sent from the host to a PID namespace's first process that has no
    handler. Control: the same signal to an ordinary process is pending or has killed it."""
    argv = [UNSHARE, "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
    with subprocess.Popen([*argv, "sleep", "1000"]) as runner:
        try:
            child = _first_child(runner.pid, "sleep")
            os.kill(child, signal.SIGTERM)
            state, pending = _signal_state(child)
            assert state in ("S", "R") and pending == 0  # dropped, and still there
        finally:
            runner.kill()
            with contextlib.suppress(ProcessLookupError, UnboundLocalError):
                os.kill(child, signal.SIGKILL)
    with subprocess.Popen(["sleep", "1000"]) as plain:
        os.kill(plain.pid, signal.SIGTERM)
        state, pending = _signal_state(plain.pid)
        assert state in ("Z", "X", "gone") or pending != 0
        assert plain.wait(timeout=30) == -signal.SIGTERM
