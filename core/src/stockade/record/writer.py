"""A shard writer's process: appends the batches its driver sends to the shard chains it owns.

Started by :class:`stockade.record.writers.Writers` as ``python -m stockade.record.writer``
with one argument, a JSON list of the shard stores it owns and the record's redaction
patterns. It reads requests from its standard input and answers each, in order, on its
standard output; both ways a frame is a 4-byte little-endian length and a pickle:

- a request is ``(op, shard, payload)``: ``("append", k, events)`` appends ``events`` to
  its ``k``-th chain in one transaction (their count); ``("opened", k, None)`` closes the
  commands of that shard a killed driver cut off (:meth:`Chain.close_orphans`: how many);
  ``("head", k, None)`` gives the shard's last ``seq``, its hash and its public key;
- an answer is ``("ok", value)`` or ``("error", message, hint)``. The first answer, before
  any request, says whether every chain opened.

It ends when its standard input does (the driver closed it, or the driver died), after
finishing the request it was on. A process the driver forked without running another
program holds that pipe's other end too, so the writer also watches its parent: when the
driver is gone (the writer has another parent), it exits at once, its transaction, if any,
left uncommitted (:data:`WATCH` seconds at most after).

Frames are pickles because a batch is the driver's own events (attrs classes), sent to the
driver's own child over a pipe no one else holds; a pickle of the batch as one object is
the cheapest way to hand them over (``docs/scale-out.md``).
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import sys
import threading
import time
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .chain import Chain

HEADER = struct.Struct("<I")
"""A frame's length."""

WATCH = 0.5
"""How often a writer looks whether its driver is still its parent."""


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame's bytes; ``None`` at the end of the stream (a cut frame ends it)."""
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (size,) = HEADER.unpack(head)
    body = stream.read(size)
    return body if len(body) == size else None


def frame(value: object) -> bytes:
    """``value`` as one frame."""
    body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(body)) + body


def _answer(chains: list[Chain], request: tuple[str, int, Any]) -> tuple[Any, ...]:
    from .shards import head_of
    from .store import StoreError

    op, shard, payload = request
    try:
        chain = chains[shard]
        if op == "append":
            return ("ok", len(chain.append_many(payload)))
        if op == "opened":
            return ("ok", len(chain.close_orphans()))
        if op == "head":
            seq, digest, key = head_of(chain.store)
            return ("ok", (seq, digest, key or chain.public))
        return ("error", f"a shard writer has no request {op!r}", "")
    except StoreError as error:
        return ("error", error.message, error.hint or "")
    except Exception as error:  # noqa: BLE001 - said to the driver, which fails the batch
        return ("error", f"{type(error).__name__}: {error}", "")


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH)
    os._exit(1)  # the driver is gone: nothing will wait for an answer


def main() -> int:
    """Serve the driver until its requests end, or it goes away."""
    from .chain import Chain
    from .store import Store, StoreError

    threading.Thread(target=_watch, args=(os.getppid(),), daemon=True).start()
    paths, redact = json.loads(sys.argv[1])
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    chains: list[Chain] = []
    try:
        for path in paths:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            chains.append(Chain(Store(path), redact))
    except (StoreError, OSError) as error:
        message = getattr(error, "message", None) or str(error)
        answers.write(frame(("error", message, getattr(error, "hint", "") or "")))
        answers.flush()
        return 1
    answers.write(frame(("ok", os.getpid())))
    answers.flush()
    try:
        while (body := read_frame(requests)) is not None:
            answers.write(frame(_answer(chains, pickle.loads(body))))  # noqa: S301 - the driver's
            answers.flush()
    except BrokenPipeError:  # the driver went away: nothing is waiting for the answer
        pass
    for chain in chains:
        chain.close()
        chain.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
