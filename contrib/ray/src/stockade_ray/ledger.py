"""The ledger: which shipped steps a worker had begun, so a lost step says whether it started.

A worker tells the ledger before it touches a step's workspace (input files, the command),
and waits for the ledger's answer; only then does it go on. When a worker dies, the driver
asks the ledger about its steps: one the ledger never heard of had not started (nothing of
it ran: safe to run again); one it heard of may have run in part. The ledger is one small
actor on the driver's node, so it is lost only with the driver's own node.
"""

from __future__ import annotations

from collections.abc import Iterable


class Ledger:
    """The action ids of the steps workers have begun (a Ray actor, made by the pool)."""

    def __init__(self) -> None:
        self._begun: set[str] = set()

    async def begin(self, action_id: str) -> None:
        """A worker is about to touch the step's workspace."""
        self._begun.add(action_id)

    async def took(self, action_ids: Iterable[str]) -> list[str]:
        """Which of ``action_ids`` were begun; all of them are forgotten."""
        found = [a for a in action_ids if a in self._begun]
        self._begun.difference_update(action_ids)
        return found

    async def forget(self, action_ids: Iterable[str]) -> None:
        """Steps that finished: no longer asked about."""
        self._begun.difference_update(action_ids)
