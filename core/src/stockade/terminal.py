"""This process's terminal: a question written to ``/dev/tty`` and the line typed after it.

Standard library only, and only ``os``: the command line's thin client imports it to answer a
prompt that travelled from the server, and pays for nothing else.
"""

from __future__ import annotations

import os


def ask_terminal(question: str) -> str | None:
    """Write ``question`` to this process's terminal (``/dev/tty``) and return the line typed
    after it (a terminal in canonical mode gives it whole); ``None`` when there is none."""
    try:
        tty = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        os.write(tty, question.encode("utf-8", "surrogateescape"))
        data = b""
        while not data.endswith(b"\n"):
            chunk = os.read(tty, 1024)
            if not chunk:
                break
            data += chunk
        return data.decode("utf-8", "replace")
    finally:
        os.close(tty)
