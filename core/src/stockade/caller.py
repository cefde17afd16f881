"""Who asked: this process, or a server's caller (the thin client of ``stockade``).

The command line's handlers run in this process for a person at a terminal, or inside the
warm server (:mod:`stockade.server`) for a client that sent its argv. What differs is kept
here, per call (a context variable, so concurrent calls on the server's threads never see
each other's): the caller's environment and folder, its terminal for a prompt, and its
interrupt. Standard library only.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .host import Host


class Caller:
    """A server's caller.

    Attributes:
        environ: the client's environment (filtered for children as this process's is).
        cwd: the client's working directory.
        host: a host from a ``--config`` path (or ``None``): a run of its own, or, given a
            run's name, the run kept under that name across calls.
        ask: show a question at the client's terminal and return the line typed; ``None``
            when the client has no terminal.
        on_interrupt: called with a callback to run when the client is interrupted (its
            Ctrl-C, or it went away); returns a function that removes the callback.
        getenv: ask the client for a variable it left out of :attr:`environ` (its name looks
            like a secret): its value, or ``None``.
    """

    def __init__(
        self,
        *,
        environ: Mapping[str, str],
        cwd: str,
        host: Callable[[str | None, str | None], Host],
        ask: Callable[[str], str] | None,
        on_interrupt: Callable[[Callable[[], None]], Callable[[], None]],
        getenv: Callable[[str], str | None] | None = None,
    ) -> None:
        self.environ = environ
        self.cwd = cwd
        self.host = host
        self.ask = ask
        self.on_interrupt = on_interrupt
        self.getenv = getenv


CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "stockade_caller", default=None
)


def current() -> Caller | None:
    """The server's caller this code runs for; ``None`` in a process of its own."""
    return CALLER.get()


def environ() -> Mapping[str, str]:
    """The caller's environment, else this process's."""
    caller = CALLER.get()
    return os.environ if caller is None else caller.environ


def cwd() -> str:
    """The caller's working directory, else this process's."""
    caller = CALLER.get()
    return os.getcwd() if caller is None else caller.cwd
