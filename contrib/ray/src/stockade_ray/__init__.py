"""stockade-ray: the same confined, recorded commands across a Ray cluster.

A :class:`StockadePool` keeps warm workers as Ray actors. The driver decides each step (and
holds the ones that would ask); a worker carries it out confined by its node's sandbox; what
comes back is appended to the driver's one signed chain. An :class:`Episode` is a run of its
own on one worker, forked from a :class:`Snapshot` when given one. See ``docs/scale-out.md``.
"""

from __future__ import annotations

from .collect import Done, StepFuture
from .episode import Episode
from .errors import RemoteFailure, StepCancelled, WorkerLost
from .forks import Export, Snapshot, TooLarge
from .pool import DEFAULT_PLACEMENT, INPUT_BYTES, StockadePool
from .worker import Caps

__all__ = [
    "DEFAULT_PLACEMENT",
    "INPUT_BYTES",
    "Caps",
    "Done",
    "Episode",
    "Export",
    "RemoteFailure",
    "Snapshot",
    "StepCancelled",
    "StepFuture",
    "StockadePool",
    "TooLarge",
    "WorkerLost",
]
