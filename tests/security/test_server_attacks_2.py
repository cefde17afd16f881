"""The warm server's attacks, continued: a command the server itself runs, a replayed
secret, a peer of another uid, a planted listener (see ``test_server_attacks.py`` for the
ground).

The chain an agent would really try: it asks the server for a command, and that command,
confined, turns back on the server that runs it. It holds no socket of the server's (the
listener, a client's connection) and cannot open one. A secret read from an earlier server
is refused for the secret even from the user's own process. A process of another uid is
refused by ``SO_PEERCRED`` even when it reaches the socket and holds the right secret. The
reverse attack, a listener planted where the next client sends its secret, cannot be made
from a confined command. One known gap is pinned: what the server reads before the secret.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stockade.server import protocol

from .conftest import PYTHON
from .test_server_attacks import (
    ATTACK,
    SECRET,
    WAIT,
    Ground,
    Networked,
    assert_hidden,
    grounded,
    hello,
    unconfined,
    unix_net_config,
)

OTHER_UID = "refused: this server serves its own user only"


@pytest.fixture(params=[True, False], ids=["xdg-runtime", "no-xdg-runtime"])
def ground(request, box, monkeypatch) -> Iterator[Ground]:
    yield from grounded(box, request.param, monkeypatch)


def call(ground: Ground, address: str, token: str, argv: list[str]) -> tuple[int, str, str]:
    """``stockade ARGV`` in the workspace, run by the server at ``address`` for the test
    (with the test's environment, as the thin client sends it): status, stdout, stderr."""
    streams = {1: "", 2: ""}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(WAIT * 2)
        sock.connect(address)
        message = {"type": "hello", "version": protocol.VERSION, "token": token, "op": "call"}
        protocol.send(sock, message)
        answer = protocol.receive(sock)
        assert answer is not None and answer["type"] == "welcome", answer
        cwd = str(ground.box.ws)
        protocol.send(
            sock, {"type": "call", "argv": argv, "cwd": cwd, "env": ground.environ, "tty": False}
        )
        while True:
            frame = protocol.receive(sock)
            assert frame is not None, f"the server hung up: {streams}"
            if frame["type"] == "exit":
                status = frame["status"]
                assert isinstance(status, int)
                return status, streams[1], streams[2]
            assert frame["type"] == "out", frame
            fd, text = frame["fd"], frame["text"]
            assert fd in (1, 2) and isinstance(text, str)
            streams[fd] += text


def test_a_command_the_server_runs_cannot_turn_on_the_server(ground: Ground, box) -> None:
    """The server runs the attack for its own client, confined: the command holds none of
    the server's sockets, and seccomp refuses it ``socket(AF_UNIX)``."""
    served, inputs = ground.prepared()
    unconfined(ground, inputs)
    argv = ["run", "--sandbox", box.sandbox, "--", *ground.argv(inputs)]
    status, out, err = call(ground, served.place.socket, served.token, argv)
    assert status == 0, err
    report = json.loads(out)
    assert_hidden(report, ground)  # fds == []: no listener or connection was handed down
    refused = {name: why for name, why in report["targets"].items() if why != "socket EPERM"}
    assert not refused, f"socket(AF_UNIX) was not refused by seccomp: {refused}"


@pytest.mark.sandboxes("bubblewrap")  # no sandbox plays a part: one run is enough
def test_a_replayed_secret_is_refused_for_the_secret(ground: Ground) -> None:
    """An earlier server's secret, presented by the user's own process, is refused for the
    secret; the new one is welcome; a server takes its secret away when it stops."""
    old = ground.start()
    replay = old.token
    token = Path(old.place.token)
    assert token.stat().st_mode & 0o777 == 0o600
    assert Path(old.place.private).stat().st_mode & 0o777 == 0o700
    assert Path(old.place.folder).stat().st_mode & 0o777 == 0o700
    old.stop()
    assert not token.exists(), "a stopped server leaves its secret behind"
    served = ground.start()
    assert served.token != replay
    refused = hello(served.place.socket, replay)
    assert refused == {"type": "refused", "code": "auth", "message": SECRET[len("refused: ") :]}
    assert hello(served.place.socket, served.token, op="status")["type"] == "welcome"


def _other_user() -> tuple[int, int]:
    """A uid and gid that are not this process's: the CI user, else ``nobody``."""
    for name in ("stockade-ci", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != os.getuid():
            return entry.pw_uid, entry.pw_gid
    pytest.fail("neither stockade-ci nor nobody exists on this machine")


@pytest.mark.sandboxes("bubblewrap")  # no sandbox plays a part: one run is enough
def test_a_peer_of_another_uid_is_refused_by_its_credentials(ground: Ground) -> None:
    """As root, the attack runs as another uid: without capabilities the 0700 folders keep
    it from the socket; with ``CAP_DAC_OVERRIDE`` it reaches the socket and reads the real
    secret, and ``SO_PEERCRED`` still refuses it (the control: the test's own uid, with the
    same secret, gets the canary made)."""
    if os.getuid() != 0:
        pytest.skip(
            "no other uid is available to an unprivileged user here: a user namespace child "
            "keeps this uid as SO_PEERCRED reports it, and a second uid needs root or "
            "newuidmap; the root run of this test covers it"
        )
    served, inputs = ground.prepared(relay=False)
    unconfined(ground, inputs)
    uid, gid = _other_user()
    caps = "+dac_override,+dac_read_search"
    drop = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    attack = [PYTHON, "-S", "-c", ATTACK, json.dumps(inputs)]
    blocked = attack_as([*drop, *attack])
    assert blocked["uid"] == uid
    assert blocked["reads"]["token"] == "EACCES", blocked["reads"]
    assert blocked["targets"][served.place.socket] == "connect EACCES", blocked["targets"]
    reached = attack_as([*drop, f"--inh-caps={caps}", f"--ambient-caps={caps}", *attack])
    assert reached["uid"] == uid
    assert reached["reads"]["token"] == "read", "the control: it holds the real secret"
    refused = dict.fromkeys(("guess", "replay", "token"), OTHER_UID)
    assert reached["targets"][served.place.socket] == refused, reached["targets"]
    assert not ground.canary.exists(), "a peer of another uid got a command run"


def attack_as(argv: list[str]) -> dict[str, Any]:
    """The attack's report, run as ``argv`` (another uid) from ``/``."""
    proc = subprocess.run(argv, capture_output=True, text=True, cwd="/", check=False)
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


SQUAT = r"""
import errno, json, os, socket, sys
path = sys.argv[1]
try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(1)
    print(json.dumps("bound"))
except OSError as error:
    print(json.dumps(errno.errorcode.get(error.errno, str(error))))
"""


def test_a_command_cannot_plant_a_socket_where_the_client_looks(
    ground: Ground, make_host, box
) -> None:
    """The reverse attack: a listener planted at the socket's path while no server runs
    would be sent the real secret by the next client. A ``network`` command allowed
    ``socket(AF_UNIX)`` cannot make one there: bwrap's view of the runtime folder is
    read-only, and of the state folder an empty read-only one; Landlock gives no right to
    make a socket outside the writable roots. The control: the test itself can plant one."""
    served = ground.start()
    place = served.place
    served.stop()  # an idle server's exit frees the path
    assert not os.path.exists(place.socket)
    script = box.ws / "squat.py"
    script.write_text(SQUAT)
    argv = [PYTHON, "-S", str(script), place.socket]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert json.loads(proc.stdout) == "bound", f"the control could not plant one: {proc.stderr}"
    os.unlink(place.socket)
    host = make_host(config=unix_net_config(box), plugins=[Networked()])
    result = host.run(box.request(argv, profile="net"))
    assert result.exit_code == 0, result.stderr.text
    expected = {"bubblewrap": "EROFS", "landlock": "EACCES"}[box.sandbox]
    assert json.loads(result.stdout.text) == expected
    assert not os.path.exists(place.socket), "a confined command planted the server's socket"


@pytest.mark.sandboxes("bubblewrap")  # no sandbox plays a part: one run is enough
def test_an_unauthenticated_hello_is_refused_before_a_huge_body_is_read(
    box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A peer that has not shown the secret announces a hello of ``MAX_FRAME`` bytes: the
    server refuses it as too large at once, rather than reading 16 MiB for it."""
    for ground in grounded(box, True, monkeypatch):
        served = ground.start()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(WAIT)
            sock.connect(served.place.socket)
            sock.sendall(struct.pack("!I", protocol.MAX_FRAME))  # a header, and no body yet
            answer = protocol.receive(sock)
        assert answer is not None
        assert answer.get("code") == "too_large", answer
