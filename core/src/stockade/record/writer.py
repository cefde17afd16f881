"""A shard writer's process: appends the batches its driver sends to the shard chains it owns.

Started by :class:`stockade.record.writers.Writer` as ``python -P -m stockade.record.writer``
(``-P``: nothing is imported from the driver's working folder) with one argument, a JSON
list: the shard stores it owns, the record's redaction patterns, the driver as the ``live``
table names a process (:func:`stockade.record.live.owner`: the commands it records as
started are the driver's to end), and the driver's process id. It reads requests from its
standard input and answers each, in order, on its standard output; both ways a frame is a
4-byte little-endian length and a pickle:

- a request is ``(op, shard, payload)``: ``("append", k, events)`` appends ``events`` to
  its ``k``-th chain in one transaction (their count); ``("opened", k, None)`` closes the
  commands of that shard a killed driver cut off (:meth:`Chain.close_orphans`: how many);
  ``("head", k, None)`` gives the shard's last ``seq``, its hash and its public key;
  ``("end", 0, None)`` ends it;
- an answer is ``("ok", value)`` or ``("error", message, hint)``. The first answer, before
  any request, says whether every chain opened.

It ends at the ``end`` request or when its standard input ends, after finishing the request
it was on. It also watches its parent: when that is no longer the driver (the driver died;
a child the driver forked without running another program would still hold the pipe), it
exits at once, its transaction, if any, left uncommitted (:data:`WATCH` seconds at most
after).

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

LONGEST = 2000
"""The most characters of an error's message or hint an answer carries (its answers' pipe
is drained, but a reply's size stays bounded whatever the error)."""


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


def _error(message: str, hint: str | None) -> tuple[str, str, str]:
    return ("error", message[:LONGEST], (hint or "")[:LONGEST])


def _answer(chains: list[Chain], request: Any) -> tuple[Any, ...]:  # noqa: ANN401, PLR0911
    from .shards import head_of
    from .store import StoreError

    try:
        op, shard, payload = request
        chain = chains[shard]
        if op == "append":
            return ("ok", len(chain.append_many(payload)))
        if op == "opened":
            return ("ok", len(chain.close_orphans()))
        if op == "head":
            seq, digest, key = head_of(chain.store)
            return ("ok", (seq, digest, key or chain.public))
        if op == "unreadable":
            return _error(f"a request the shard writer cannot read: {payload}", None)
        return _error(f"a shard writer has no request {op!r}", None)
    except StoreError as error:
        return _error(error.message, error.hint)
    except Exception as error:  # noqa: BLE001 - said to the driver, which fails the batch
        return _error(f"{type(error).__name__}: {error}", None)


def _watch(driver: int) -> None:
    while os.getppid() == driver:
        time.sleep(WATCH)
    os._exit(1)  # the driver is gone: nothing will wait for an answer


def _request(body: bytes) -> Any:  # noqa: ANN401 - what the driver sent
    try:
        return pickle.loads(body)  # noqa: S301 - the driver's own request
    except Exception as error:  # noqa: BLE001 - answered as the malformed request it is
        return ("unreadable", 0, error)


def main() -> int:
    """Serve the driver until it ends the writer, or goes away."""
    from .chain import Chain
    from .store import Store, StoreError

    paths, redact, carrier, driver = json.loads(sys.argv[1])
    threading.Thread(target=_watch, args=(driver,), daemon=True).start()
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    chains: list[Chain] = []
    try:
        for path in paths:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            chains.append(Chain(Store(path), redact, carrier))
    except (StoreError, OSError) as error:
        message = getattr(error, "message", None) or str(error)
        where = os.path.dirname(paths[len(chains)])
        answers.write(frame(_error(message, f"check {where} (a shard of the record)")))
        answers.flush()
        return 1
    answers.write(frame(("ok", os.getpid())))
    answers.flush()
    try:
        while (body := read_frame(requests)) is not None:
            request = _request(body)
            if request == ("end", 0, None):
                break
            answers.write(frame(_answer(chains, request)))
            answers.flush()
    except BrokenPipeError:  # the driver went away: nothing is waiting for the answer
        pass
    for chain in chains:
        chain.close()
        chain.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
