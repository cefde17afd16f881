"""The output blobs the record's ``result`` events name, re-hashed for ``stockade verify``.

Each blob is named by the sha256 of its content, so a blob changed, cut or replaced no
longer hashes to its name. A blob is opened as its own regular file (never through a link,
never a FIFO, :func:`~stockade.record.blobs.open_blob_file`); the ones checked before and
unchanged since (:class:`~stockade.record.blobs.CheckedBlobs`) are not read again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .blobs import BlobError, CheckedBlobs, expected_size, open_blob_file

if TYPE_CHECKING:
    from .store import Store


def check_outputs(
    store: Store,
    found: list[tuple[Any, ...]],
    run: str | None,
    memo: CheckedBlobs,
    add: Callable[..., None],
) -> tuple[int, int, int]:
    """Re-hash each blob the result events name (once each): how many, how many hold, and
    the bytes read."""
    named: dict[str, tuple[str, int, str, int, int | None]] = {}
    for seq, body, *_rest in found:
        run_id, step, kind = _rest[3], _rest[4], _rest[6]
        if kind != "result" or (run is not None and run_id != run):
            continue
        try:
            result = json.loads(body)["result"]
            streams = [(name, result[name]) for name in ("stdout", "stderr")]
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # a body that is not a result's: its link already failed
        for name, stream in streams:
            digest = stream.get("blob") if isinstance(stream, dict) else None
            if digest and isinstance(digest, str):
                size = expected_size(stream, digest)
                named.setdefault(digest, (name, step, run_id, seq, size))
    held = size = 0
    for digest, (name, step, run_id, seq, expected) in named.items():
        try:
            with open_blob_file(store, digest, size=expected) as handle:
                size += os.fstat(handle.fileno()).st_size
                memo.check(handle, digest)
            held += 1
        except BlobError as error:
            actual = error.details.get("actual")
            if "error" in error.details:  # missing, or not a regular file
                add(
                    f"the blob of the {name} of step {step} of run {run_id} (event {seq}) is"
                    f" missing ({error.details['error']}): {digest}",
                    blob=digest,
                )
                continue
            text = (
                f"the blob of the {name} of step {step} of run {run_id} (event {seq}) was"
                f" changed: it now hashes to {actual}"
            )
            if str(actual).endswith(" bytes"):  # refused by its size, before it was read
                text = (
                    f"the blob of the {name} of step {step} of run {run_id} (event {seq}) was"
                    f" changed: it now is {actual}"
                )
            if actual is None:
                text = (
                    f"the {name} of step {step} of run {run_id} (event {seq}) names"
                    f" {digest[:80]!r}, which is not a blob name"
                )
            add(text, blob=digest)
        except OSError as error:  # it went while it was read
            add(
                f"the blob of the {name} of step {step} of run {run_id} (event {seq}) is missing"
                f" ({error.strerror}): {digest}",
                blob=digest,
            )
    return len(named), held, size
