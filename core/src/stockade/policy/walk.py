"""The walk that finds what private globs match, and what it remembers of each folder.

What a folder matched is remembered while its change time stays (:func:`_seen`): the kernel
moves a folder's change time on every entry added, removed or renamed, and no process can set
it back (setting the mtime back moves it), so a folder whose ``(device, inode, ctime, mtime)``
is the same as when it was listed holds the same names. A folder is remembered only once that
time is :data:`SETTLED_NS` old, so a change within the clock's tick cannot hide behind it.

The memory lives in the process (a warm server's next step stats each folder instead of
listing it), and, given a ``memory`` folder (the store's: no command can write there, since
the store is never a writable root), in a file per workspace and glob list, so the first step
of the next process (a CLI call without the server) stats instead of listing too. A file that
cannot be read, or is not what this module writes, is ignored: everything is listed again.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import marshal
import os
import tempfile
import time
from collections.abc import Callable

from ..trees import nameable
from .globs import Globs, matcher

__all__ = ["SETTLED_NS", "forget", "walk"]

SETTLED_NS = 2_000_000_000
"""A folder whose entries last changed this long before it was listed is remembered: until
its change time moves, its matches are not looked for again."""
_MOST = 100_000  # folders remembered, all globs together; past it the memory starts again
_FORMAT = 1  # the memory file's layout; another number is not read

_Stamp = tuple[int, int, int, int]
_Seen = tuple[tuple[tuple[str, bool], ...], tuple[tuple[str, str], ...]]
_SEEN: dict[tuple[str, str, str], tuple[_Stamp, _Seen]] = {}
_LOADED: set[str] = set()  # the memory files this process has read


def forget() -> None:
    """Forget every folder (this process's memory; the files stay): the next walk is cold."""
    _SEEN.clear()
    _LOADED.clear()


def walk(
    folder: str,
    prefix: str,
    globs: list[str],
    found: dict[str, None],
    links: dict[str, None],
    *,
    memory: str | None = None,
) -> None:
    """Each entry below ``folder`` whose name (``prefix`` + its path from ``folder``) a glob
    matches, without going below a match or into a folder no glob could match beneath: into
    ``found``, or ``links`` for a symlink (its target is what is private). ``memory``: the
    folder where what was matched is kept between processes."""
    listed = tuple(globs)
    digest = _digest(listed)
    made: list[Globs] = []

    def globs_of() -> Globs:  # made only when a folder must be listed
        if not made:
            made.append(matcher(listed))
        return made[0]

    where = _file(memory, folder, prefix, digest) if memory else None
    if where is not None and where not in _LOADED:
        _load(where, digest)
    added = 0
    stack = [(folder, prefix)]
    while stack:
        here, shown = stack.pop()
        seen, new = _seen(here, shown, digest, globs_of)
        added += new
        if seen is None:
            continue
        hits, into = seen
        for path, symlink in hits:
            (links if symlink else found).setdefault(path, None)
        stack += into
    if where is not None and added:
        _save(where, digest, folder)


def _seen(
    here: str, shown: str, digest: str, globs_of: Callable[[], Globs]
) -> tuple[_Seen | None, int]:
    """What of folder ``here`` (named ``shown``) the globs match (path, is a symlink), and
    its folders to go into; with 1 when it was listed and is now remembered, else 0."""
    try:
        st = os.stat(here)
    except OSError as error:
        return _unseen(here, error), 0
    stamp = (st.st_dev, st.st_ino, st.st_ctime_ns, st.st_mtime_ns)
    key = (here, shown, digest)
    cached = _SEEN.get(key)
    if cached is not None and cached[0] == stamp:
        return cached[1], 0
    now = time.time_ns()
    try:
        entries = list(os.scandir(here))
    except OSError as error:
        return _unseen(here, error), 0
    globs = globs_of()
    names = [shown + entry.name for entry in entries]
    matched = globs.matches(shown, names)
    hits = tuple((e.path, e.is_symlink()) for e, hit in zip(entries, matched, strict=True) if hit)
    rest = [(e, n) for e, n, hit in zip(entries, names, matched, strict=True) if not hit]
    folders = [(e.path, n + "/") for e, n in rest if e.is_dir(follow_symlinks=False)]
    into = tuple(f for f in folders if globs.any or globs.beneath(f[1]))
    seen = (hits, into)
    if now - max(st.st_ctime_ns, st.st_mtime_ns) <= SETTLED_NS:
        return seen, 0
    if len(_SEEN) >= _MOST:
        _SEEN.clear()
    _SEEN[key] = (stamp, seen)
    return seen, 1


def _unseen(here: str, error: OSError) -> _Seen | None:
    """A folder that could not be looked into: gone (nothing of it), or hidden whole, since
    what it holds is unknown (no right to list it, which a command could give itself back;
    or deeper than a path can name: then the deepest folder above it that one can)."""
    if error.errno in (errno.ENOENT, errno.ENOTDIR):
        return None
    return (((nameable(here), False),), ())


def _digest(globs: tuple[str, ...]) -> str:
    return hashlib.sha256("\0".join(globs).encode()).hexdigest()[:32]


def _file(memory: str, folder: str, prefix: str, digest: str) -> str | None:
    """The memory file of a walk from ``folder`` with these globs, when ``memory`` exists."""
    if not os.path.isdir(memory):
        return None
    name = hashlib.sha256(f"{folder}\0{prefix}\0{digest}".encode()).hexdigest()[:32]
    return os.path.join(memory, name)


def _load(where: str, digest: str) -> None:
    """What a memory file holds, into this process's memory (unless it knows better)."""
    _LOADED.add(where)
    try:
        with open(where, "rb") as file:
            data = marshal.loads(file.read())  # noqa: S302 - the store's own, no command writes it
        version, kept_digest, entries = data
        if version != _FORMAT or kept_digest != digest:
            return
        kept = {}
        for here, shown, stamp, hits, into in entries:
            if not (isinstance(here, str) and isinstance(shown, str) and len(stamp) == 4):
                return
            kept[here, shown, digest] = (tuple(stamp), (tuple(hits), tuple(into)))
    except (OSError, EOFError, ValueError, TypeError):
        return  # unreadable, or not ours: every folder is listed
    for key, value in kept.items():
        _SEEN.setdefault(key, value)


def _save(where: str, digest: str, folder: str) -> None:
    """This process's memory of the folders below ``folder`` with these globs, into the
    memory file (replaced whole; a failure leaves the old one, or none)."""
    below = folder.rstrip("/") + "/"
    entries = tuple(
        (here, shown, stamp, seen[0], seen[1])
        for (here, shown, kept), (stamp, seen) in list(_SEEN.items())
        if kept == digest and (here == folder or here.startswith(below))
    )
    with contextlib.suppress(OSError):
        handle, temporary = tempfile.mkstemp(dir=os.path.dirname(where), prefix=".walk-")
        try:
            with os.fdopen(handle, "wb") as file:
                marshal.dump((_FORMAT, digest, entries), file)
            os.replace(temporary, where)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
