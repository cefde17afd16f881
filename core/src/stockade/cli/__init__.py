"""The ``stockade`` command line: the thin client first, the commands (:mod:`.commands`) after.

:func:`entry` hands the hot commands (``run``, ``pending``, ``approve``, ``decline``) to the
warm server through :mod:`.client`, importing only the standard library on that path; every
other command, and every command when there is no server, runs here in-process. Names of
:mod:`.commands` (``main``, ``HANDLERS``, ``build_parser``, ...) are read through this
package, imported on first use so that the client's path never loads them.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: the client's path imports as little as it can
if TYPE_CHECKING:
    from .commands import (
        ELSEWHERE,
        EXIT_BROKEN_PIPE,
        EXIT_USAGE,
        HANDLERS,
        build_parser,
        main,
    )


def entry() -> None:
    """Console-script entry point: through the warm server when it can, else in-process."""
    import os
    import sys

    from ..server.card import ENV
    from .client import call

    # Set by the native client when it hands a call over: for this process alone.
    native = os.environ.pop(ENV, None)
    status = call(sys.argv[1:], native=native)
    if status is None:
        from .commands import entry as in_process

        in_process()
        raise SystemExit(status)
    # Served: all that is left is the interpreter's tear-down (freeing every module, ~2 ms);
    # the client wrote and flushed everything it printed, and registered nothing to run.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = status or 120  # as the interpreter's own exit reports a failed flush
    os._exit(status)


def __getattr__(name: str) -> object:
    if name not in _COMMANDS:  # a submodule the import system asks about before loading it
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.commands"), name)


_COMMANDS = frozenset(
    {"ELSEWHERE", "EXIT_BROKEN_PIPE", "EXIT_USAGE", "HANDLERS", "build_parser", "main"}
)


__all__ = [
    "ELSEWHERE",
    "EXIT_BROKEN_PIPE",
    "EXIT_USAGE",
    "HANDLERS",
    "build_parser",
    "entry",
    "main",
]
