"""The client checks its server before it sends anything: attacks with a squatting listener.

A squatter is a real listener on the path where the client looks for its server. It records
every byte it receives, and answers as a server would (welcome, some output, exit 0), so a
client that trusted it would print its output and exit 0, as the issue saw. As root the
squatter runs as the second account ``stockade-ci``; as any other user it runs as that user,
and only the folder checks can tell it from the server (the listener check needs a second
account). Each attack is beside a control: the same squatter where the checks cannot tell it
from the server receives the secret and the ``STOCKADE_SECRET_*`` canary, so the recording
would see the breach.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import procs
from helpers.server import FULL, WAIT, Stockade, stockade_for
from stockade.cli.client import SECRET_WORDS, needed_env
from stockade.policy.resolve import SECRET_PATTERN
from stockade.server import card, protocol
from stockade.server.trust import folder_problem
from stockade.testing import PYTHON_CLI, native_client

ROOT = os.getuid() == 0
ATTACKER = "stockade-ci"
CANARY = "canary-5f1e0c77d3"
HIDDEN = "hidden-9a04b1e2c8"

SQUATTER = r"""
import os, socket, struct, sys
folder, record, version = sys.argv[1:4]
os.makedirs(folder, mode=0o700, exist_ok=True)
path = os.path.join(folder, "socket")
if os.path.lexists(path):
    os.unlink(path)
sock = socket.socket(socket.AF_UNIX)
sock.bind(path)
os.chmod(path, 0o777)
sock.listen(16)
open(record + ".ready", "w").close()
def frame(obj):
    import json
    body = json.dumps(obj).encode()
    return struct.pack("!I", len(body)) + body
while True:
    conn, _ = sock.accept()
    conn.settimeout(5)
    got = b""
    replies = [frame({"type": "welcome", "version": version, "pid": 1}),
               frame({"type": "out", "fd": 1, "text": "squatter\n"}) +
               frame({"type": "exit", "status": 0})]
    try:
        while True:
            data = conn.recv(65536)
            if not data:
                break
            got += data
            with open(record, "ab") as out:
                out.write(data)
            while replies and len(got) >= 4:
                size = struct.unpack("!I", got[:4])[0]
                if len(got) < 4 + size:
                    break
                got = got[4 + size:]
                conn.sendall(replies.pop(0))
    except OSError:
        pass
    conn.close()
"""


class Squatter:
    """A recording listener on ``folder/socket``, as ``user`` (``None``: this user)."""

    def __init__(self, folder: Path, record: Path, *, user: str | None) -> None:
        self.record = record
        python = sys.executable if user is None else "/usr/bin/python3"
        argv = [python, "-c", SQUATTER, str(folder), str(record), protocol.VERSION]
        if user is not None:
            argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", *argv]
        self.process = subprocess.Popen(argv, env={"PATH": "/usr/bin:/bin"})
        ready = Path(f"{record}.ready")
        procs.wait_until(lambda: ready.exists() or self.process.poll() is not None, WAIT)
        assert ready.exists(), "the squatter did not listen"

    def received(self) -> bytes:
        try:
            return self.record.read_bytes()
        except FileNotFoundError:
            return b""

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder under /tmp both accounts reach, sticky and world-writable like /tmp."""
    found = Path(tempfile.mkdtemp(prefix="stockade-trust-", dir="/tmp"))
    found.chmod(0o1777)
    try:
        yield found
    finally:
        shutil.rmtree(found, ignore_errors=True)


@pytest.fixture
def squatters() -> Iterator[list[Squatter]]:
    found: list[Squatter] = []
    yield found
    for squatter in found:
        squatter.stop()


@pytest.fixture(params=["python", "native"])
def client(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """Each attack meets both clients: the Python one, and the native one (``bin/stockade``)
    holding a card that points where the squatter listens."""
    if request.param == "python":
        return PYTHON_CLI
    native = native_client()
    if native is None:
        if os.environ.get("STOCKADE_CI"):
            pytest.fail("no native client was built (no C compiler at build time)")
        pytest.skip("no native client was built (no C compiler at build time)")
    return (native,)


def _card(sk: Stockade) -> None:
    """For the native client, the card the Python client leaves, naming the place where
    the squatter listens: so the native client's own checks are what must stop it (with no
    card it would hand over before it connects, and only the Python client's checks would
    be attacked)."""
    if sk.client != list(PYTHON_CLI):
        Path(sk.place.private).mkdir(parents=True, mode=0o700, exist_ok=True)
        card.leave(sk.place, sk.env, os.path.realpath(sk.client[0]))


def _client(tmp_path: Path, runtime: Path, client: tuple[str, ...]) -> Stockade:
    sk = Stockade(tmp_path, client=client)
    sk.env["XDG_RUNTIME_DIR"] = str(runtime)
    _card(sk)
    return sk


def _call(sk: Stockade) -> subprocess.CompletedProcess[bytes]:
    env = {"STOCKADE_SECRET_CANARY": CANARY, "GITHUB_TOKEN": HIDDEN}
    return sk.run("run", "--yes", "--mode", FULL, "--", "echo", "hi", env=env)


def _refused(done: subprocess.CompletedProcess[bytes], says: str) -> None:
    """The call ran in-process (its own output, status 0), after one line saying why."""
    assert (done.returncode, done.stdout) == (0, b"hi\n"), done.stderr
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("stockade: running in-process: refused the server at "), lines
    assert says in lines[0], lines


def _attacker() -> str | None:
    return ATTACKER if ROOT else None


def _runtime(base: Path, mode: int) -> Path:
    runtime = base / "runtime"
    runtime.mkdir()
    runtime.chmod(mode)
    return runtime


def test_control_a_squatter_the_checks_cannot_tell_gets_the_secret(
    tmp_path: Path, base: Path, squatters: list[Squatter], client: tuple[str, ...]
) -> None:
    runtime = _runtime(base, 0o700)
    sk = _client(tmp_path, runtime, client)
    sk.place.make()
    Path(sk.place.token).write_text("f" * 64)  # a stale secret
    squatters.append(Squatter(Path(sk.place.folder), base / "record", user=None))
    done = _call(sk)
    assert (done.returncode, done.stdout) == (0, b"squatter\n"), done.stderr
    got = squatters[0].received()
    assert b"f" * 64 in got and CANARY.encode() in got  # the recording sees a breach
    assert got.count(b"f" * 64) == 1  # one client said it all: the native one handed nothing over
    assert HIDDEN.encode() not in got  # what no call needs never travels


@pytest.mark.skipif(not ROOT, reason="a listener of another uid needs root to make")
def test_a_stale_secret_and_another_users_listener_get_nothing(
    tmp_path: Path, base: Path, squatters: list[Squatter], client: tuple[str, ...]
) -> None:
    runtime = _runtime(base, 0o1777)  # root's XDG_RUNTIME_DIR pointing at a /tmp
    with stockade_for(tmp_path, client=client) as sk:
        sk.env["XDG_RUNTIME_DIR"] = str(runtime)
        assert _call(sk).stdout == b"hi\n"
        _card(sk)  # (the hand-over of that call left one too)
        pid = sk.wait_server()
        os.kill(pid, signal.SIGKILL)  # its secret stays behind
        assert procs.wait_dead(pid, WAIT)
        assert Path(sk.place.token).exists()
        shutil.rmtree(runtime / "stockade")  # a temp cleaner
        squatter = Squatter(Path(sk.place.folder), base / "record", user=ATTACKER)
        squatters.append(squatter)
        _refused(_call(sk), f"belongs to uid {_uid(ATTACKER)}, not this user")
        assert squatter.received() == b""
        assert sk.server_pid() == pid  # the dead one's: it started none in her folder


@pytest.mark.skipif(not ROOT, reason="a listener of another uid needs root to make")
def test_another_users_listener_in_the_users_own_folder_gets_nothing(
    tmp_path: Path, base: Path, squatters: list[Squatter], client: tuple[str, ...]
) -> None:
    # The folders pass (the user's, 0700); only SO_PEERCRED tells the listener is hers.
    runtime = _runtime(base, 0o700)
    sk = _client(tmp_path, runtime, client)
    sk.place.make()
    Path(sk.place.token).write_text("f" * 64)
    folder = Path(sk.place.folder)
    opened = (runtime, folder.parent, folder)
    for each in opened:  # for her to bind in, then back to the user's alone
        each.chmod(0o777)
    squatter = Squatter(folder, base / "record", user=ATTACKER)
    squatters.append(squatter)
    for each in opened:
        each.chmod(0o700)
    _refused(_call(sk), f"its listener runs as uid {_uid(ATTACKER)}, not 0")
    assert squatter.received() == b""


def test_a_world_writable_runtime_folder_is_refused(
    tmp_path: Path, base: Path, squatters: list[Squatter], client: tuple[str, ...]
) -> None:
    runtime = _runtime(base, 0o777)
    sk = _client(tmp_path, runtime, client)
    Path(sk.place.private).mkdir(parents=True, mode=0o700, exist_ok=True)
    Path(sk.place.token).write_text("f" * 64)
    squatter = Squatter(Path(sk.place.folder), base / "record", user=_attacker())
    squatters.append(squatter)
    says = f"belongs to uid {_uid(ATTACKER)}" if ROOT else f"{runtime} may be written by others"
    _refused(_call(sk), says)
    assert squatter.received() == b""
    squatter.stop()
    squatters.clear()
    shutil.rmtree(runtime / "stockade")
    # With nobody there yet, the client still starts no server where she could come later.
    _refused(_call(sk), f"{runtime} may be written by others (mode 777)")
    assert not Path(sk.place.pid).exists()


def test_a_symlinked_stockade_folder_is_refused(
    tmp_path: Path, base: Path, squatters: list[Squatter], client: tuple[str, ...]
) -> None:
    runtime = _runtime(base, 0o700)
    sk = _client(tmp_path, runtime, client)
    Path(sk.place.private).mkdir(parents=True, mode=0o700, exist_ok=True)
    Path(sk.place.token).write_text("f" * 64)
    theirs = base / "theirs"
    squatter = Squatter(theirs / Path(sk.place.folder).name, base / "record", user=_attacker())
    squatters.append(squatter)
    (runtime / "stockade").symlink_to(theirs)
    says = f"belongs to uid {_uid(ATTACKER)}" if ROOT else f"{runtime}/stockade is a symlink"
    _refused(_call(sk), says)
    assert squatter.received() == b""


def _uid(user: str) -> int:
    import pwd

    return pwd.getpwnam(user).pw_uid


# --- the folder rule, case by case -------------------------------------------------------


def test_the_folder_rule(tmp_path: Path) -> None:
    uid = os.getuid()
    top = tmp_path / "top"
    top.mkdir(mode=0o700)
    inner = top / "stockade"
    inner.mkdir(mode=0o700)
    assert folder_problem(str(inner)) is None
    assert folder_problem(str(inner / "not-yet" / "there")) is None  # the server makes it
    inner.chmod(0o720)
    assert folder_problem(str(inner)) == f"{inner} may be written by others (mode 720)"
    inner.chmod(0o1777)  # sticky does not excuse the socket's own folder
    assert folder_problem(str(inner)) == f"{inner} may be written by others (mode 1777)"
    inner.chmod(0o700)
    top.chmod(0o1777)  # a sticky folder above it is /tmp's case
    assert folder_problem(str(inner)) is None
    top.chmod(0o777)
    assert folder_problem(str(inner)) == f"{top} may be written by others (mode 777)"
    top.chmod(0o700)
    link = top / "link"
    link.symlink_to(inner)
    assert folder_problem(str(link)) == f"{link} is a symlink"
    assert folder_problem(str(link / "below")) == f"{link} is a symlink"
    plain = top / "file"
    plain.write_text("")
    assert folder_problem(str(plain)) == f"{plain} is not a folder"
    assert folder_problem(str(inner), uid=uid + 1) == (
        f"{inner} belongs to uid {uid}, not this user"
    )
    if uid == 0:
        os.chown(inner, _uid(ATTACKER), -1)
        assert folder_problem(str(inner)) == (
            f"{inner} belongs to uid {_uid(ATTACKER)}, not this user"
        )
        os.chown(inner, 0, -1)
        os.chown(top, _uid(ATTACKER), -1)
        assert folder_problem(str(inner)) == (
            f"{top} belongs to uid {_uid(ATTACKER)}, not this user or root"
        )
    with contextlib.suppress(OSError):
        top.chmod(0o700)
    assert stat.S_ISDIR(top.stat().st_mode)


def test_the_client_words_are_the_filters_pattern() -> None:
    assert SECRET_PATTERN.pattern == "|".join(SECRET_WORDS)
    names = ["PATH", "HOME", "GITHUB_TOKEN", "aws_secret", "STOCKADE_SECRET_X", "MY_PASSWD"]
    sent = needed_env(dict.fromkeys(names, "v"))
    assert sorted(sent) == ["HOME", "PATH", "STOCKADE_SECRET_X"]
    assert all(SECRET_PATTERN.search(n) for n in set(names) - {"HOME", "PATH"})


# --- the server's folder is never a writable root -----------------------------------------


def test_the_servers_folder_is_never_a_writable_root(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    project = tmp_path / "project"
    project.mkdir()
    with stockade_for(tmp_path / "sk") as sk:
        sk.env["XDG_RUNTIME_DIR"] = str(runtime)
        first = sk.run("run", "--yes", "--mode", FULL, "--", "true", cwd=project)
        assert first.returncode == 0, first.stderr
        pid = sk.wait_server()
        server = runtime / "stockade"
        for granted, rule in (
            (runtime, "holds_server"),
            (server, "server"),
            (Path(sk.place.folder), "server"),
        ):
            moved = sk.run(
                "run", "--yes", "--mode", FULL, "--json", "--grant-write", str(granted),
                "--", "mv", str(server), str(runtime / "moved"),
                cwd=project,
            )  # fmt: skip
            error = json.loads(moved.stdout)["error"]
            assert (error["code"], error["details"]["rule"]) == ("unsafe_root", rule), error
            assert Path(sk.place.socket).exists()
        # the control: the same grant of a project folder is let through, and runs
        granted = sk.run(
            "run", "--yes", "--mode", FULL, "--grant-write", str(project), "--", "true",
            cwd=project,
        )  # fmt: skip
        assert granted.returncode == 0, granted.stderr
        assert sk.server_pid() == pid
