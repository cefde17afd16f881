"""The credential stores a sandbox masks: one list, read by the protected-path rules, the
writable-root rule and every provider."""

from __future__ import annotations

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
