"""What the native client settles before it talks: a closed standard descriptor never
becomes its socket, and a locale that decodes the environment otherwise than UTF-8 hands
the call to the Python client, which withholds what it reads as a secret's name.

Both found by a review of the native client: with stdout closed the socket was fd 1, so a
command's output went into the control channel as frames (an ``answer`` a later prompt
would take); under ISO-8859-1 the Python client reads ``DB_PA\\xdfWORD`` as ``DB_PAßWORD``,
whose upper case holds PASSWORD, while the native client read UTF-8 and sent it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.fake_server import FakeServer, frame
from stockade.testing import native_client

NATIVE = native_client()
pytestmark = pytest.mark.skipif(
    NATIVE is None and not os.environ.get("STOCKADE_CI"),
    reason="no native client was built (no C compiler)",
)
EXIT = frame({"type": "exit", "status": 0})
INJECTED = frame({"type": "answer", "text": "y\n"})


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeServer]:
    assert NATIVE is not None, "STOCKADE_CI is set, and no native client was built"
    server = FakeServer(tmp_path / "fake", NATIVE)
    yield server
    server.close()


def _closing(fd: int):  # a preexec_fn
    return lambda: os.close(fd)


@pytest.mark.parametrize("fd", [1, 2, 0])
def test_a_closed_descriptor_never_carries_output_to_the_server(fake: FakeServer, fd: int) -> None:
    assert NATIVE is not None
    text = INJECTED.decode("ascii")  # output that is, byte for byte, an `answer` frame
    script = [frame({"type": "out", "fd": 1, "text": text}), frame({"type": "out", "fd": 2,
              "text": text}), EXIT]  # fmt: skip
    fake.script, fake.conversations = script, []
    done = subprocess.run(
        [NATIVE, "run", "--", "true"], env=fake.env, capture_output=fd == 0,
        stdin=subprocess.DEVNULL if fd != 0 else None, preexec_fn=_closing(fd),
        timeout=30, check=False, start_new_session=True,
    )  # fmt: skip
    for talk in fake.talks:
        talk.join(30)
    assert done.returncode == 0
    (talk,) = fake.conversations
    assert len(talk.frames) == 2 and talk.rest == b"", talk.frames  # the hello and the call
    # Control: with both streams open, the same output is printed where it belongs.
    fake.conversations = []
    shown, _talks = fake.run([NATIVE], ["run", "--", "true"], script)
    assert shown.stdout == INJECTED and shown.stderr == INJECTED


def _latin1_locale(root: Path) -> str:
    localedef = shutil.which("localedef")
    assert localedef, "localedef (libc-bin) is needed to make an ISO-8859-1 locale"
    root.mkdir()
    made = subprocess.run(
        [localedef, "-i", "de_DE", "-f", "ISO-8859-1", str(root / "de_DE.ISO-8859-1")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (root / "de_DE.ISO-8859-1").is_dir(), made.stderr
    return str(root)


def test_a_locale_that_is_not_utf8_hands_the_call_to_the_python_client(
    fake: FakeServer, tmp_path: Path
) -> None:
    assert NATIVE is not None
    locales = _latin1_locale(tmp_path / "locales")
    env = {b"DB_PA\xdfWORD": b"the-canary", b"PLAIN": b"kept"}
    latin = {b"LOCPATH": locales.encode(), b"LC_ALL": b"de_DE.ISO-8859-1", **env}
    done, talks = fake.run([NATIVE], ["run", "--", "true"], [EXIT], env=latin)
    assert done.returncode == 0, done.stderr
    sent = b"".join(f for talk in talks for f in talk.frames)
    assert b"PLAIN" in sent and b"the-canary" not in sent and b"WORD" not in sent
    # Control: under UTF-8 the byte is no letter, the name no secret's, and both clients
    # send it: the test sees the variable when it goes.
    done, talks = fake.run([NATIVE], ["run", "--", "true"], [EXIT], env={b"LC_ALL": b"C.UTF-8",
                           **env})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert b"the-canary" in b"".join(f for talk in talks for f in talk.frames)


def test_without_proc_the_client_still_finds_itself(tmp_path: Path) -> None:
    # In a mount namespace without /proc the client resolves the path it was started by,
    # so it can still hand over (here: --version, which the Python client answers).
    assert NATIVE is not None
    unshare = shutil.which("unshare")
    assert unshare, "unshare (util-linux) is needed"
    # (a tmpfs over /proc: an unprivileged user's namespace cannot unmount what it inherited)
    script = f'mount -t tmpfs none /proc && exec "{NATIVE}" --version'
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    args = [unshare, "-r", "-m", "sh", "-c", script] if os.getuid() else [
        unshare, "-m", "sh", "-c", script]  # fmt: skip
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.startswith("stockade "), done.stderr
