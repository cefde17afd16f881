"""``stockade ui``: bind loopback, print the URL with this start's token, serve until stopped.

The socket is bound here, to ``127.0.0.1`` and nothing else (there is no option for another
address), before uvicorn is handed it: the printed URL names the port the kernel gave, and
no code path can widen the address. Uvicorn serves it with proxy headers ignored, no
``Server`` header and no access log (its lines would carry the paths of the page).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import tempfile
from collections.abc import Mapping

from stockade.config.load import load_config
from stockade.errors import UsageError
from stockade.record.store import open_store
from stockade.run import spawn

from .answers import Answers
from .app import build_app
from .guard import Secrets

LOOPBACK = "127.0.0.1"


def bind(port: int) -> socket.socket:
    """A listening TCP socket on ``127.0.0.1:port`` (``0``: any free port).

    Raises:
        UsageError: the port is taken or out of range.
    """
    if not 0 <= port <= 65535:
        raise UsageError(f"--port takes 0 to 65535, got {port}")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((LOOPBACK, port))
    except OSError as error:
        sock.close()
        raise UsageError(
            f"cannot listen on {LOOPBACK}:{port}: {error.strerror}",
            hint="name another port with --port N, or 0 for any free one",
        ) from None
    sock.listen(64)
    sock.set_inheritable(False)
    return sock


def main(
    *,
    config: str | None,
    port: int = 0,
    open_browser: bool = False,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Serve the run page until interrupted; the exit status.

    Raises:
        StockadeError: the config or the store cannot be read, or the port is taken.
    """
    import uvicorn

    env = dict(os.environ if environ is None else environ)
    settings = load_config(config, environ=env)
    store = open_store(settings)
    sock = bind(port)
    secrets = Secrets.new(sock.getsockname()[1])
    answers = Answers(config, env)
    app = build_app(store, settings, answers, secrets)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            proxy_headers=False,
            server_header=False,
            date_header=False,
            lifespan="off",
            ws="none",
            http="h11",
        )
    )
    print(f"stockade ui: open {secrets.url}", flush=True)
    print("  (loopback only; the token is new at each start; Ctrl-C stops)", file=sys.stderr)
    if open_browser:
        _open(secrets.url)
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        server.run(sockets=[sock])
    except (KeyboardInterrupt, Stopped):
        pass  # uvicorn shut down gracefully, then raised the signal again: a normal stop
    finally:
        signal.signal(signal.SIGTERM, previous)
        if answers.running():
            print(
                f"stockade ui: stopping the {answers.running()} step(s) it started",
                file=sys.stderr,
            )
        answers.close()
        sock.close()
        store.close()
    return 0


class Stopped(Exception):
    """SIGTERM arrived: the server stops as it does on Ctrl-C."""


def _stop(_signum: int, _frame: object) -> None:
    raise Stopped


def wants_browser(environ: Mapping[str, str]) -> bool:
    """Whether a graphical browser can be opened: a display, or macOS."""
    return sys.platform == "darwin" or bool(
        environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY")
    )


def _open(url: str) -> None:
    """Open ``url`` in a browser through an owner-only file that redirects to it, so the
    token never appears on a browser's command line (which other users can read)."""
    import html

    folder = tempfile.mkdtemp(prefix="stockade-ui-")
    path = os.path.join(folder, "open.html")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        target = html.escape(url, quote=True)
        handle.write(
            f'<!doctype html><meta http-equiv="refresh" content="0;url={target}">'
            f'<a href="{target}">open the run page</a>\n'
        )
    spawn.open_browser(f"file://{path}")
