"""Bad input to a live server over a raw socket: each gets a ``refused`` frame that names
what was wrong, and the server goes on serving another client meanwhile.

Every bad conversation is held open (mid-frame where it can be) while a real client runs a
command through the same server, so "meanwhile" is literal: the bad peer has not finished
when the good one is served. Past the hello, the bad peer presents the right secret, so the
refusal is for the frame, not for the authentication. ``protocol.receive`` itself is fuzzed
over arbitrary bytes.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.server import FULL, WAIT, Stockade, frames, stockade_for
from stockade.server import protocol

HEADER = struct.Struct("!I")
SLOW = "3"
"""The hello timeout the tests' servers get (``STOCKADE_SERVER_HELLO_TIMEOUT``), seconds."""


@pytest.fixture(scope="module")
def sk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stockade]:
    # one server for the module: it must survive every bad peer before it and serve on
    with stockade_for(tmp_path_factory.mktemp("server")) as found:
        found.env["STOCKADE_SERVER_HELLO_TIMEOUT"] = SLOW
        started = found.run("run", "--yes", "--mode", FULL, "--", "true")
        assert started.returncode == 0, started.stderr
        pid = found.wait_server()
        yield found
        assert found.server_pid() == pid  # the same server served the whole module


def served_meanwhile(sk: Stockade, word: str) -> None:
    done = sk.run("run", "--yes", "--mode", FULL, "--", "echo", word)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{word}\n".encode(), b"")


def refusal(conn: socket.socket) -> dict[str, object]:
    """The one frame the server sends before closing: a refusal with a code and a message."""
    got = frames(conn)
    assert len(got) == 1, got
    [frame] = got
    assert frame["type"] == "refused", frame
    assert isinstance(frame["message"], str) and frame["message"]
    return frame


def frame(body: bytes) -> bytes:
    return HEADER.pack(len(body)) + body


def call(**fields: object) -> bytes:
    return frame(json.dumps({"type": "call", **fields}).encode())


GOOD_CALL = {"argv": ["run", "--", "true"], "cwd": "/", "env": {}, "tty": False}


@pytest.mark.parametrize(
    ("sent", "code", "says"),
    [
        (HEADER.pack(100) + b'{"type": "ca', "truncated", "inside a frame (12 of 100 bytes"),
        (b"\x00\x00", "truncated", "inside a frame"),
        (HEADER.pack(17 * 1024 * 1024), "too_large", "over the limit of 16777216"),
        (frame(b"{not json"), "bad_frame", "not JSON"),
        (frame(b"\xff\xfe{}"), "bad_frame", "not JSON"),
        (frame(b"[1, 2]"), "bad_frame", "JSON object with a string 'type'"),
        (frame(b'"call"'), "bad_frame", "JSON object with a string 'type'"),
        (frame(b'{"argv": []}'), "bad_frame", "JSON object with a string 'type'"),
        (frame(b'{"type": 7}'), "bad_frame", "JSON object with a string 'type'"),
        (frame(b'{"type": "answer", "text": "y"}'), "bad_frame", "expected a call frame"),
        (call(**{**GOOD_CALL, "argv": "run -- true"}), "bad_call", "argv must be a list"),
        (call(**{**GOOD_CALL, "argv": ["run", 7]}), "bad_call", "argv must be a list"),
        (call(**{**GOOD_CALL, "cwd": "relative"}), "bad_call", "cwd must be an absolute path"),
        (call(**{**GOOD_CALL, "cwd": None}), "bad_call", "cwd must be an absolute path"),
        (call(**{**GOOD_CALL, "env": ["A=b"]}), "bad_call", "env must be an object of strings"),
        (call(**{**GOOD_CALL, "env": {"A": 1}}), "bad_call", "env must be an object of strings"),
        (call(**{**GOOD_CALL, "tty": "yes"}), "bad_call", "tty must be true or false"),
        (call(**{**GOOD_CALL, "argv": ["serve", "--stop"]}), "bad_call", "run the others"),
        (call(**{**GOOD_CALL, "argv": ["--no-server", "run"]}), "bad_call", "run the others"),
    ],
)
def test_a_bad_call_is_refused_while_others_are_served(sk: Stockade, sent, code, says) -> None:
    with sk.hello() as conn:
        conn.sendall(sent)  # the frame, whole or in part; the peer is still there
        served_meanwhile(sk, "meanwhile")
        conn.shutdown(socket.SHUT_WR)  # now it has said all it will say
        refused = refusal(conn)
    assert refused["code"] == code
    assert says in str(refused["message"])
    served_meanwhile(sk, "after")


def test_an_unknown_op_is_refused(sk: Stockade) -> None:
    with sk.connect() as conn:
        protocol.send(
            conn, {"type": "hello", "version": protocol.VERSION, "token": sk.token(), "op": "x"}
        )
        got = frames(conn)
    assert [f["type"] for f in got] == ["welcome", "refused"]
    assert got[1]["code"] == "bad_frame"
    assert "unknown op 'x': call, status or stop" in str(got[1]["message"])


@pytest.mark.parametrize(
    ("hello", "code", "says"),
    [
        ({"token": "0" * 64}, "auth", "the secret does not match"),
        ({"token": None}, "auth", "the secret does not match"),
        ({"token": "\udcff"}, "auth", "the secret does not match"),
        ({"version": "0.0.0/0"}, "version", f"this server speaks {protocol.VERSION}"),
        ({"type": "call"}, "bad_frame", "expected a hello frame, got 'call'"),
    ],
)
def test_a_bad_hello_is_refused(sk: Stockade, hello, code, says) -> None:
    message = {"type": "hello", "version": protocol.VERSION, "token": sk.token(), **hello}
    with sk.connect() as conn:
        conn.sendall(protocol.encode(message))
        refused = refusal(conn)
    assert (refused["code"], says in str(refused["message"])) == (code, True)
    served_meanwhile(sk, "after")


def test_a_huge_hello_before_the_secret_is_refused_unread(sk: Stockade) -> None:
    with sk.connect() as conn:
        conn.sendall(HEADER.pack(0xFFFFFFFF))
        served_meanwhile(sk, "meanwhile")
        refused = refusal(conn)
    assert refused["code"] == "too_large"


@pytest.mark.parametrize("past_hello", [False, True], ids=["silent", "hello-then-silent"])
def test_a_slow_client_is_dropped_while_others_are_served(sk: Stockade, past_hello) -> None:
    conn = sk.hello() if past_hello else sk.connect()
    with conn:
        served_meanwhile(sk, "meanwhile")  # the silent peer does not hold the server up
        conn.settimeout(WAIT)  # the server's hello timeout (SLOW) ends it well before this
        refused = refusal(conn)
    assert refused["code"] == "timeout"
    kind = "call" if past_hello else "hello"
    assert str(refused["message"]) == f"no {kind} frame within {SLOW} seconds"
    served_meanwhile(sk, "after")


# --- protocol.receive over arbitrary bytes --------------------------------------------------


def _receive_all(data: bytes) -> list[dict[str, object]]:
    """Every object ``receive`` gives for ``data`` (the peer then closes); it returns an
    object or None, or raises ProtocolError: anything else fails the test."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(data)
        theirs.close()
        got: list[dict[str, object]] = []
        while True:
            try:
                message = protocol.receive(ours)
            except protocol.ProtocolError as error:
                assert error.code in {"truncated", "too_large", "bad_frame"}
                assert error.message
                return got
            if message is None:
                return got
            assert isinstance(message, dict)
            assert isinstance(message["type"], str)
            got.append(message)


# database=None: CI runs this as a user too, who cannot write the checkout's .hypothesis
@settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.binary(max_size=2048))
def test_receive_on_arbitrary_bytes_gives_an_object_none_or_a_protocol_error(data) -> None:
    _receive_all(data)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)  # NaN and Infinity are not JSON
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(JSON | st.binary(max_size=64), max_size=4), st.binary(max_size=16))
def test_receive_on_framed_values_gives_objects_with_a_type_or_an_error(bodies, tail) -> None:
    data = b""
    for body in bodies:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        data += frame(raw)
    _receive_all(data + tail)


@given(st.dictionaries(st.text(), JSON, max_size=4), st.text())
@settings(max_examples=200, deadline=None, database=None)
def test_a_frame_encode_makes_is_one_receive_reads_back(fields, kind) -> None:
    message = {**fields, "type": kind}
    got = _receive_all(protocol.encode(message))
    assert got == [json.loads(json.dumps(message))]


def test_encode_refuses_what_is_not_json() -> None:
    for value in (float("inf"), float("nan"), b"bytes", object()):
        with pytest.raises((ValueError, TypeError)):
            protocol.encode({"type": "out", "text": value})


CLIENT_MODULES = frozenset(
    {
        "stockade",
        "stockade.cli",
        "stockade.cli.client",
        "stockade.config",
        "stockade.config.dirs",
        "stockade.server",
        "stockade.server.paths",
        "stockade.server.card",
        "stockade.server.protocol",
        "stockade.server.trust",
        "stockade.terminal",
    }
)
"""What the thin client may load: each module is a file read and unmarshalled at every call."""


def test_the_thin_client_loads_only_its_own_modules_and_c_ones() -> None:
    # Each pure-Python standard module costs the client's start (enum, re, collections, struct
    # and typing each cost a millisecond or more): it loads only C modules besides its own.
    import subprocess
    import sys

    script = (
        "import sys; before = set(sys.modules)\n"
        "from stockade.cli.client import call\n"
        "print('\\n'.join(sorted(set(sys.modules) - before)))\n"
    )
    found = subprocess.run(
        [sys.executable, "-I", "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    ours = {name for name in found if name.startswith("stockade")}
    assert ours == CLIENT_MODULES
    python = [
        name for name in found if not name.startswith(("stockade", "_")) and name != "__future__"
    ]
    assert python == [], f"the thin client imports pure-Python modules: {python}"


def test_text_that_is_not_json_is_a_value_error_in_the_thin_client() -> None:
    # The C scanner raises json.decoder's error class only when json.decoder is loaded,
    # which the thin client never loads: without it, the error must still be a ValueError.
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from stockade.server import protocol\n"
        "assert 'json.decoder' not in sys.modules\n"
        "for text in ('{nope', '{\"a\":1,}', '[1,', '\"\\\\x\"'):\n"
        "    try:\n"
        "        protocol.loads(text)\n"
        "    except ValueError:\n"
        "        continue\n"
        "    raise SystemExit(f'{text} was read')\n"
    )
    subprocess.run([sys.executable, "-I", "-c", script], check=True, timeout=60)
