"""stockade-ray: the same confined, recorded commands across a Ray cluster.

A :class:`StockadePool` keeps warm workers as Ray actors. The driver decides each step (and
holds the ones that would ask); a worker carries it out confined by its node's sandbox; what
comes back is appended to the driver's one signed chain. See ``docs/scale-out.md``.
"""

from __future__ import annotations

from .errors import RemoteFailure, StepCancelled, WorkerLost
from .pool import DEFAULT_PLACEMENT, INPUT_BYTES, Done, StepFuture, StockadePool
from .worker import Caps

__all__ = [
    "DEFAULT_PLACEMENT",
    "INPUT_BYTES",
    "Caps",
    "Done",
    "RemoteFailure",
    "StepCancelled",
    "StepFuture",
    "StockadePool",
    "WorkerLost",
]
