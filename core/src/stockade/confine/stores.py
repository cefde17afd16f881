"""The credential stores a sandbox masks: one list, read by the protected-path rules, the
writable-root rule and every provider."""

from __future__ import annotations

import os
from collections.abc import Iterable

from .. import resolved

__all__ = ["CREDENTIAL_STORES", "stores_under"]

# Credential stores: masked (unreadable and unwritable) in every mode, under every home and
# wherever they sit inside a writable root. A name with a slash matches the path's last parts.
CREDENTIAL_STORES = (
    ".ssh",
    ".aws",
    ".gnupg",
    ".kube",
    ".docker",
    ".netrc",
    ".config/gh",
    ".config/gcloud",
    ".azure",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
)
"""Credential stores, relative to a home: masked (unreadable and unwritable) in every
confined mode, under every home in use and wherever they sit inside a writable root
(:func:`stockade.confine.protected.survey` finds those). A name with a slash matches the
path's last parts."""


def stores_under(homes: Iterable[str]) -> list[str]:
    """The credential stores that exist under ``homes`` now, resolved, each once: ready to
    mask (a symlinked store is masked where it really is). With
    :func:`stockade.confine.protected.homes` for ``homes``."""
    found: list[str] = []
    for home in homes:
        for name in CREDENTIAL_STORES:
            path = os.path.join(home, name)
            if os.path.lexists(path) and os.path.exists(path):
                real = resolved.realpath(path)
                if real not in found:
                    found.append(real)
    return found
