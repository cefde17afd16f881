"""The card the native client (``core/native/``) finds its server by.

The Python client names its server by a digest that includes where this code lives
(:class:`~stockade.server.paths.Place`), which a C program cannot know. When the native
client hands a call to the Python client, it says where it is (``STOCKADE_NATIVE_CLIENT``:
its real path); once the Python client has connected to a verified server (or started one)
and was welcomed, it leaves a card for the native client in ``<state>/server/`` (0700):

    native-<FNV-1a 64 of KEY, 16 hex digits>

holding KEY, then :data:`~stockade.server.protocol.VERSION`, the socket's path and the secret's
path, each ending in a NUL. KEY is ``stockade-card/1``, the uid, the real state folder,
``HOME``, the runtime folder as the :class:`Place` takes it (``""`` when it does not) and the
native client's real path, each ending in a NUL: all a C program can see. The native client
reads a card only when its KEY is its own, and trusts nothing on it: it checks what the card
names as :mod:`stockade.server.trust` does, and hands over to this client when the card is
missing or stale (the server refuses its hello, nothing listens).

FNV-1a names the file only (the KEY on the card is compared whole), so the C side needs no
digest of its own. Standard library only (the thin client imports it).
"""

from __future__ import annotations

import os

from . import protocol

TYPE_CHECKING = False  # not typing's: the thin client imports this module
if TYPE_CHECKING:
    from collections.abc import Mapping

    from .paths import Place

ENV = "STOCKADE_NATIVE_CLIENT"
"""Where the native client says it is when it hands a call over (its real path)."""

MAGIC = "stockade-card/1"


def key(place: Place, environ: Mapping[str, str], native: str) -> bytes:
    """The card's KEY for ``place`` and the native client at ``native``."""
    fields = (
        MAGIC,
        str(os.getuid()),
        place.state,
        environ.get("HOME", ""),
        place.runtime or "",
        native,
    )
    return b"".join(os.fsencode(field) + b"\0" for field in fields)


def path(place: Place, card_key: bytes) -> str:
    """Where the card with ``card_key`` lies: FNV-1a 64 of the key names it."""
    digest = 0xCBF29CE484222325
    for byte in card_key:
        digest = ((digest ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return os.path.join(place.private, f"native-{digest:016x}")


def leave(place: Place, environ: Mapping[str, str], native: str) -> None:
    """Leave (or renew) the card for the native client at ``native``: written aside, 0600,
    then renamed over the old one, so a reader sees a whole card or the one before.

    Raises:
        OSError: the card could not be written (the call goes on without it).
    """
    card_key = key(place, environ, native)
    values = (protocol.VERSION, place.socket, place.token)
    text = card_key + b"".join(os.fsencode(value) + b"\0" for value in values)
    target = path(place, card_key)
    aside = f"{target}.{os.getpid()}"
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        while text:
            text = text[os.write(fd, text) :]
    finally:
        os.close(fd)
    try:
        os.replace(aside, target)
    except OSError:
        os.unlink(aside)
        raise
