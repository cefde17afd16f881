"""The built-in credential broker (being written; see the credential broker work)."""

from __future__ import annotations
