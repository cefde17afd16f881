"""The entry point of stockade-local: registers the ``local`` executor."""

from __future__ import annotations

from collections.abc import Callable

from stockade import hookimpl
from stockade.run.executor import Executor


@hookimpl
def stockade_register_executors(register: Callable[[type[Executor]], None]) -> None:
    """Register :class:`~stockade_local.executor.LocalExecutor` as ``local``."""
    from .executor import LocalExecutor

    register(LocalExecutor)
