"""A scripted stand-in for the warm server, where both clients look for it: the native
client (by a card left for it) and the Python client (by its :class:`Place`).

It passes every check a client makes (this user's 0700 folders, this user's listener, the
secret on file), records every frame each connection sends, and answers with a script: raw
bytes to send (well-formed frames or not), or :data:`RECEIVE` to wait for the client's next
frame. So a test can run the same conversation against the native client and the Python
client and compare what each sent and printed, byte for byte.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

from stockade.server import card, protocol
from stockade.server.paths import Place
from stockade.testing import PYTHON_CLI

RECEIVE = None
"""In a script: wait for the client's next frame (an answer to ``ask`` or ``env``)."""
Script = Sequence[bytes | None]
WAIT = 30.0


def frame(message: dict[str, object]) -> bytes:
    """``message`` as the real server encodes it."""
    return protocol.encode(message)


def raw(body: bytes) -> bytes:
    """A frame of any body: its length, then the bytes as they are."""
    return len(body).to_bytes(4, "big") + body


WELCOME = frame({"type": "welcome", "version": protocol.VERSION, "pid": 1})


class Conversation:
    """What one connection sent: its whole frames, and any bytes after the last one."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.rest = b""


class FakeServer:
    """A listener at the :class:`Place` of ``env`` (made here, private), with a card for the
    native client at ``native`` (its real path), answering every connection with ``script``
    after a welcome."""

    def __init__(self, root: Path, native: str | None) -> None:
        for name in ("home", "state", "run"):
            (root / name).mkdir(mode=0o700, parents=True, exist_ok=True)
        self.env = {
            "HOME": str(root / "home"),
            "XDG_STATE_HOME": str(root / "state"),
            "XDG_RUNTIME_DIR": str(root / "run"),
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
        }
        self.place = Place(self.env)
        self.place.make()
        fd = os.open(self.place.token, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, b"ab" * 32 + b"\n")
        os.close(fd)
        if native is not None:
            card.leave(self.place, self.env, os.path.realpath(native))
        self.native = native
        self.script: Script = []
        self.conversations: list[Conversation] = []
        self.talks: list[threading.Thread] = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address, folder = self.place.address()  # a long path goes by /proc/self/fd, as the server's
        try:
            self.listener.bind(address)
        except OSError:
            self.listener.close()
            raise
        finally:
            if folder is not None:
                os.close(folder)
        self.listener.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()

    def close(self) -> None:
        """Stop listening."""
        self.listener.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            found = Conversation()
            self.conversations.append(found)
            talk = threading.Thread(target=self._talk, args=(conn, found, self.script), daemon=True)
            self.talks.append(talk)
            talk.start()

    @staticmethod
    def _talk(conn: socket.socket, found: Conversation, script: Script) -> None:
        conn.settimeout(WAIT)
        pending = b""

        def receive() -> bool:
            nonlocal pending
            while True:
                if len(pending) >= 4:
                    size = int.from_bytes(pending[:4], "big")
                    if len(pending) >= 4 + size:
                        found.frames.append(pending[4 : 4 + size])
                        pending = pending[4 + size :]
                        return True
                data = conn.recv(1 << 20)
                if not data:
                    return False
                pending += data

        try:
            if receive():  # the hello
                conn.sendall(WELCOME)
                if receive():  # the call
                    for step in script:
                        if step is RECEIVE:
                            if not receive():
                                break
                        else:
                            conn.sendall(step)
            conn.shutdown(socket.SHUT_WR)
            while receive():  # a signal, or an answer the script did not wait for
                pass
        except OSError:
            pass
        finally:
            found.rest = pending
            conn.close()

    def run(
        self,
        client: Sequence[str],
        args: Sequence[str | bytes],
        script: Script,
        *,
        env: dict[bytes, bytes] | None = None,
        cwd: Path | bytes | None = None,
    ) -> tuple[subprocess.CompletedProcess[bytes], list[Conversation]]:
        """``stockade ARGS`` by ``client`` against ``script``: how it ended, and the
        conversations it had (the native client that handed over has two)."""
        self.script = script
        self.conversations = []
        full = {os.fsencode(k): os.fsencode(v) for k, v in self.env.items()}
        full.update(env or {})
        done = subprocess.run(
            [*client, *args],
            env=full,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=WAIT,
            start_new_session=True,  # no terminal: an ask goes unanswered on both sides
            check=False,
        )
        for talk in self.talks:  # every frame the client sent is recorded
            talk.join(WAIT)
        self.talks = []
        return done, list(self.conversations)


def both(
    fake: FakeServer,
    args: Sequence[str | bytes],
    script: Script,
    **kwargs: object,
) -> tuple[
    tuple[subprocess.CompletedProcess[bytes], list[Conversation]],
    tuple[subprocess.CompletedProcess[bytes], list[Conversation]],
]:
    """The same call by the native client and by the Python client."""
    assert fake.native is not None
    native = fake.run([fake.native], args, script, **kwargs)  # type: ignore[arg-type]
    python = fake.run(PYTHON_CLI, args, script, **kwargs)  # type: ignore[arg-type]
    return native, python
