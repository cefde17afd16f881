"""Stockade as the OpenAI Agents SDK's sandbox.

``SandboxAgent(..., capabilities=[stockade_agents.shell(), ...])`` run with
``RunConfig(sandbox=SandboxRunConfig(client=StockadeSandboxClient(host)))``: every command the
agent runs is a step of a Stockade run, classified, decided, confined and recorded.
"""

from __future__ import annotations

from .approval import shell
from .client import StockadeSandboxClient, StockadeSandboxClientOptions
from .results import REFUSED
from .session import StockadeSandboxSession, StockadeSandboxSessionState
from .snapshots import StockadeSnapshot, StockadeSnapshotSpec

__all__ = [
    "REFUSED",
    "StockadeSandboxClient",
    "StockadeSandboxClientOptions",
    "StockadeSandboxSession",
    "StockadeSandboxSessionState",
    "StockadeSnapshot",
    "StockadeSnapshotSpec",
    "shell",
]
