"""The native client (``core/native/``) against the Python client, frame for frame.

Both talk to one scripted server (:mod:`helpers.fake_server`) that passes every check; what
each sends (the hello, the call with its argv, folder and environment, the answers to ``ask``
and ``env``) and what each prints from ``out`` frames must be the same bytes, for argv,
environments and texts that hypothesis makes hard: bytes that are not UTF-8, astral
characters, names whose ``str.upper`` makes a secret's word, large outputs. Malformed frames
from the server end both in the same one-line error and status 125, and never in a crash.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.fake_server import RECEIVE, FakeServer, both, frame, raw
from stockade.cli.client import needed_env, withheld
from stockade.server import protocol
from stockade.testing import native_client

NATIVE = native_client()
pytestmark = pytest.mark.skipif(
    NATIVE is None and not os.environ.get("STOCKADE_CI"),
    reason="no native client was built (no C compiler)",
)
LOST = (
    b"stockade: error[server_lost]: the server went away before the command ended; "
    b"`stockade replay` shows what the record says of it\n"
)
EXIT = frame({"type": "exit", "status": 0})
EXAMPLES = settings(
    max_examples=25,
    deadline=None,
    database=None,  # CI runs this as a user too, who cannot write the checkout's .hypothesis
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeServer]:
    assert NATIVE is not None, "STOCKADE_CI is set, and no native client was built"
    server = FakeServer(tmp_path_factory.mktemp("fake"), NATIVE)
    yield server
    server.close()


def _served(done: subprocess.CompletedProcess[bytes], talks: list[object]) -> None:
    """The native client served the call itself: one conversation, no hand-over."""
    assert len(talks) == 1, (talks, done.stderr)


# --- what the client sends ----------------------------------------------------------------

_FRAGMENTS = [
    "key",
    "\u017f",
    "\ufb05",
    "oken",
    "\u0131",
    "\u00df",
    "ecret",
    "PASS",
    "wd",
    "STOCKADE_",
    "x",
]
_names = st.one_of(
    st.binary(min_size=1, max_size=10),
    st.lists(st.sampled_from(_FRAGMENTS), min_size=1, max_size=4).map(
        lambda parts: "".join(parts).encode()
    ),
).filter(lambda name: b"=" not in name and b"\0" not in name)
_reserved = {b"HOME", b"XDG_STATE_HOME", b"XDG_RUNTIME_DIR", b"PATH", b"LANG", b"LC_ALL"}
_envs = st.dictionaries(
    _names.filter(lambda name: name not in _reserved and not name.startswith(b"LC_")),
    st.binary(max_size=12).filter(lambda value: b"\0" not in value),
    max_size=6,
)
_args = st.lists(st.binary(max_size=12).filter(lambda a: b"\0" not in a), max_size=5)


@EXAMPLES
@given(args=_args, env=_envs, folder=st.binary(min_size=1, max_size=8), lang=st.booleans())
def test_the_call_frame_is_the_python_clients(
    fake: FakeServer, tmp_path: Path, *, args: list[bytes], env: dict[bytes, bytes], folder: bytes,
    lang: bool,
) -> None:  # fmt: skip
    name = folder.replace(b"/", b"_").replace(b"\0", b"_")
    cwd = os.path.join(os.fsencode(tmp_path), b"d" + name)
    os.makedirs(cwd, exist_ok=True)
    if not lang:  # PEP 538: Python sets LC_CTYPE in the C locale, and sends it
        fake.env.pop("LANG")
    try:
        (native, n_talks), (python, p_talks) = both(
            fake, ["run", "--", *args], [EXIT], env=env, cwd=cwd
        )
    finally:
        fake.env["LANG"] = "C.UTF-8"
    _served(native, n_talks)
    assert (native.returncode, native.stdout, native.stderr) == (0, b"", b"")
    assert python.returncode == 0, python.stderr
    assert n_talks[0].frames[:2] == p_talks[0].frames[:2]  # the hello and the call
    # and the server's own reader gives back what was given, bytes that are not UTF-8 too
    call = protocol.loads(n_talks[0].frames[1].decode("ascii"))
    assert isinstance(call, dict)
    assert call["argv"] == ["run", "--", *map(os.fsdecode, args)]
    assert os.fsencode(call["cwd"]) == cwd
    sent = call["env"]
    assert isinstance(sent, dict)
    for name, value in env.items():
        text = os.fsdecode(name)
        assert sent.get(text) == (None if withheld(text) else os.fsdecode(value))


@EXAMPLES
@given(
    texts=st.lists(
        st.tuples(
            st.sampled_from([1, 2, True, 1.0, "1", None, 7]),
            st.text(
                st.one_of(
                    st.characters(codec="utf-8"),
                    st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF),
                    st.characters(min_codepoint=0x10000),
                )
            ),
        ),
        max_size=6,
    ),
    status=st.integers(-300, 300) | st.booleans() | st.none() | st.just(2.5),
)
def test_out_frames_print_as_the_python_client_prints_them(
    fake: FakeServer, texts: list[tuple[object, str]], status: object
) -> None:
    script = [frame({"type": "out", "fd": fd, "text": text}) for fd, text in texts]
    script.append(frame({"type": "exit", "status": status}))
    (native, talks), (python, _) = both(fake, ["run", "--", "true"], script)
    _served(native, talks)
    assert (native.returncode, native.stdout, native.stderr) == (
        python.returncode,
        python.stdout,
        python.stderr,
    )
    expected_out = b"".join(
        text.encode("utf-8", "surrogateescape") for fd, text in texts if fd == 1
    )
    assert native.stdout == expected_out


def test_frames_with_fields_left_out_read_as_the_python_client_reads_them(
    fake: FakeServer,
) -> None:
    script = [
        frame({"type": "out", "fd": 1}),  # no text: nothing written
        frame({"type": "out", "text": "to stderr\n"}),  # no fd: stderr
        frame({"type": "ask"}),  # no question: an empty answer all the same
        None,
        frame({"type": "refused"}),  # no code, no message: None, as str() says
    ]
    (native, n_talks), (python, p_talks) = both(fake, ["run", "--", "true"], script)
    _served(native, n_talks)
    assert (native.returncode, native.stdout, native.stderr) == (
        125,
        b"",
        b"to stderr\nstockade: error[server]: None: None\n",
    )
    assert (python.returncode, python.stdout, python.stderr) == (
        native.returncode,
        native.stdout,
        native.stderr,
    )
    assert n_talks[0].frames == p_talks[0].frames


def test_a_huge_output_comes_whole(fake: FakeServer) -> None:
    text = "\U0001f600 é \udcff ascii " * 60_000  # a 2 MiB frame, three times
    script = [frame({"type": "out", "fd": 1, "text": text})] * 3 + [EXIT]
    (native, talks), (python, _) = both(fake, ["run", "--", "true"], script)
    _served(native, talks)
    assert native.stdout == python.stdout == text.encode("utf-8", "surrogateescape") * 3
    assert native.returncode == python.returncode == 0


@EXAMPLES
@given(names=st.lists(_names, min_size=1, max_size=4), env=_envs)
def test_env_and_ask_are_answered_as_the_python_client_answers(
    fake: FakeServer, names: list[bytes], env: dict[bytes, bytes]
) -> None:
    for name in names:  # every asked name is also set: the answer depends on withheld()
        env.setdefault(name, b"value-" + name)
    script: list[bytes | None] = []
    for name in names:
        script += [frame({"type": "env", "name": os.fsdecode(name)}), RECEIVE]
    script += [frame({"type": "env", "name": 5}), RECEIVE, frame({"type": "env"}), RECEIVE]
    script += [frame({"type": "ask", "text": "go ahead? \U0001f600 "}), RECEIVE, EXIT]
    (native, n_talks), (python, p_talks) = both(fake, ["run", "--", "true"], script, env=env)
    _served(native, n_talks)
    assert native.returncode == python.returncode == 0, (native.stderr, python.stderr)
    assert n_talks[0].frames == p_talks[0].frames


def test_the_secret_words_upper_case_as_python_does() -> None:
    # The native client's table of characters whose upper case holds ASCII letters: every
    # code point, walked against str.upper, must be in it (or have none).
    source = (Path(__file__).parents[1] / "core" / "native" / "client.c").read_text()
    table = source[
        source.index("SPECIAL_UPPER[] = {") : source.index("};", source.index("SPECIAL_UPPER"))
    ]
    expected = []
    for cp in range(0x80, sys.maxunicode + 1):
        if 0xD800 <= cp < 0xE000:
            continue
        upper = chr(cp).upper()
        if any(ord(c) < 0x80 for c in upper):
            mapped = "".join(c if ord(c) < 0x80 else "\\x01" for c in upper)
            expected.append(f'{{0x{cp:X}, "{mapped}"}}')
    found = [part.strip() for part in table.split("{", 1)[1].replace("\n", " ").split("},")]
    found = [f"{part}}}" if not part.endswith("}") else part for part in found if part]
    assert sorted(found) == sorted(expected)
    # What the table is for: names a byte-wise upper case would pass, str.upper withholds.
    assert withheld("\u017fecret") and withheld("\ufb05oken") and not withheld("to\ufb05")
    assert needed_env({"a\u017fecret": "1", "STOCKADE_SECRET_X": "2"}) == {"STOCKADE_SECRET_X": "2"}


# --- a server that says what no server says --------------------------------------------

_BAD = {
    "closed at once": b"",
    "truncated": raw(b'{"type":"out","fd":1,"text":"abc"}')[:20],
    "too large": (16 * 1024 * 1024 + 1).to_bytes(4, "big") + b"{}",
    "not json": raw(b"{nope"),
    "not an object": raw(b"[1]"),
    "a type that is not a string": raw(b'{"type":1}'),
    "NaN": raw(b'{"type":"exit","status":NaN}'),
    "nested too deep": raw(b'{"type":"out","a":' + b"[" * 5000 + b"]" * 5000 + b"}"),
    "not UTF-8": raw(b'{"type":"out","fd":1,"text":"\xff"}'),
    "a raw newline in a string": raw(b'{"type":"out","fd":1,"text":"a\nb"}'),
    "an unknown type": raw(b'{"type":"welcome"}'),
    "after the value": raw(b'{"type":"exit","status":0} x'),
    "a bad escape": raw(b'{"type":"out","fd":1,"text":"\\x41"}'),
    "half a frame header": b"\0\0",
}


@pytest.mark.parametrize("bad", list(_BAD), ids=list(_BAD))
def test_a_malformed_frame_is_a_clear_error(fake: FakeServer, bad: str) -> None:
    script = [frame({"type": "out", "fd": 1, "text": "before\n"}), _BAD[bad]]
    (native, talks), (python, _) = both(fake, ["run", "--", "true"], script)
    _served(native, talks)
    assert (native.returncode, native.stdout, native.stderr) == (125, b"before\n", LOST)
    assert (python.returncode, python.stdout, python.stderr) == (125, b"before\n", LOST)


@EXAMPLES
@given(body=st.binary(max_size=64) | st.sampled_from([b'{"type":"exit"', b'{"type":"out"}']))
def test_any_frame_ends_as_the_python_clients_does(fake: FakeServer, body: bytes) -> None:
    (native, talks), (python, _) = both(fake, ["run", "--", "true"], [raw(body)])
    _served(native, talks)
    assert native.returncode >= 0  # no signal: nothing crashed
    assert (native.returncode, native.stdout, native.stderr) == (
        python.returncode,
        python.stdout,
        python.stderr,
    )


def test_a_refusal_mid_call_is_printed(fake: FakeServer) -> None:
    script = [frame({"type": "refused", "code": "busy", "message": "too many \U0001f600"})]
    (native, talks), (python, _) = both(fake, ["run", "--", "true"], script)
    _served(native, talks)
    assert native.returncode == python.returncode == 125
    assert (
        native.stderr
        == python.stderr
        == ("stockade: error[server]: busy: too many \U0001f600\n".encode())
    )


def test_a_closed_stdout_is_141(fake: FakeServer) -> None:
    script = [frame({"type": "out", "fd": 1, "text": "x" * 100_000}), RECEIVE]
    for client in ([fake.native], None):
        read, write = os.pipe()
        os.close(read)  # nobody reads: the first write is EPIPE
        argv = [*(client or [sys.executable, "-c", "from stockade.cli import entry; entry()"])]
        fake.script = script
        fake.conversations = []
        done = subprocess.run(
            [*argv, "run", "--", "true"], env=fake.env, stdout=write, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, timeout=30, check=False, start_new_session=True,
        )  # fmt: skip
        os.close(write)
        assert done.returncode == 141, (argv, done.stderr)


def test_without_a_card_it_hands_over_and_the_python_client_leaves_one(tmp_path: Path) -> None:
    assert NATIVE is not None
    # (a folder deep enough that the socket's path is too long for sockaddr_un: both clients
    # reach it through /proc/self/fd)
    server = FakeServer(tmp_path / ("deep" * 20), None)  # no card yet
    assert len(server.place.socket) > 108
    try:
        done, talks = server.run([NATIVE], ["run", "--", "true"], [EXIT])
        assert done.returncode == 0, done.stderr
        assert len(talks) == 1  # the Python client's, after the hand-over
        cards = list(Path(server.place.private).glob("native-*"))
        assert len(cards) == 1 and cards[0].stat().st_mode & 0o777 == 0o600
        done, talks = server.run([NATIVE], ["run", "--", "true"], [EXIT])
        _served(done, talks)  # now the native client serves it itself
        # The variable that tells the Python client where the native one is goes no further.
        assert b"STOCKADE_NATIVE_CLIENT" not in b"".join(talks[0].frames)
    finally:
        server.close()
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_doctor_says_which_client_is_installed(tmp_path: Path) -> None:
    assert NATIVE is not None
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "STOCKADE_NO_SERVER": "1"}
    done = subprocess.run(
        [NATIVE, "doctor", "--json"], env=env, capture_output=True, timeout=60, check=False
    )
    assert json.loads(done.stdout)["client"] == (
        f"native, {NATIVE} (it hands what it does not serve to stockade-py)"
    ), done.stderr
