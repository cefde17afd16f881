"""Output blobs: each recorded stream kept once under its sha256, and read back only checked.

A result event names each stream's blob by the sha256 of its content; the files sit in
``blobs/AB/ABCDEF...`` beside the store, owner-only. Reading one back
(:func:`open_blob`) re-hashes the whole of it first and hands back a private copy, so what
is shown is exactly what was checked; a blob whose content no longer matches its name, or
that is gone, is a :class:`BlobError` naming it, never its text.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from typing import BinaryIO

from .store import Store, StoreError


def blob_dir(store: Store) -> str:
    """Where output blobs live: ``blobs/`` beside the store."""
    return os.path.join(os.path.dirname(store.path) or ".", "blobs")


def put_blob(store: Store, data: bytes) -> str:
    """Keep ``data`` under its sha256 (once); its name."""
    digest = hashlib.sha256(data).hexdigest()
    folder = os.path.join(blob_dir(store), digest[:2])
    path = os.path.join(folder, digest)
    if os.path.exists(path):
        return digest
    os.makedirs(blob_dir(store), mode=0o700, exist_ok=True)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    temp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(temp, path)
    return digest


def put_blob_file(store: Store, source: str, redact: Callable[[bytes], bytes] | None = None) -> str:
    """Keep the content of the file ``source`` as a blob, streamed (it may be gigabytes);
    with ``redact``, each line passes through it first."""
    os.makedirs(blob_dir(store), mode=0o700, exist_ok=True)
    temp = os.path.join(blob_dir(store), f"incoming.{os.getpid()}.{os.urandom(4).hex()}")
    digest = hashlib.sha256()
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with open(source, "rb") as reader, os.fdopen(fd, "wb") as writer:
            chunks: Iterator[bytes] = (
                iter(lambda: reader.read(1 << 20), b"")
                if redact is None
                else (redact(line) for line in reader)
            )
            for chunk in chunks:
                digest.update(chunk)
                writer.write(chunk)
        name = digest.hexdigest()
        folder = os.path.join(blob_dir(store), name[:2])
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.replace(temp, os.path.join(folder, name))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return name


class BlobError(StoreError):
    """A recorded output's blob is missing, or its content no longer matches its digest."""

    code = "blob"


def blob_path(store: Store, digest: str) -> str:
    """Where blob ``digest`` lives.

    Raises:
        BlobError: ``digest`` is not a sha256 name (a body edited to point elsewhere).
    """
    if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
        raise BlobError(
            f"the record names a blob {digest[:80]!r}, which is not a sha256 digest",
            hint="run `stockade verify`: the record was edited",
            details={"blob": digest[:80]},
        )
    return os.path.join(blob_dir(store), digest[:2], digest)


class CheckedBlobs:
    """Blobs already re-hashed in this process, by the identity of their file (device,
    inode, size, mtime and ctime: a write in place changes the ctime, which no one sets
    back), so that a page drawn again does not hash gigabytes again."""

    def __init__(self) -> None:
        import threading

        self._seen: dict[str, tuple[int, ...]] = {}
        self._lock = threading.Lock()

    def check(self, handle: BinaryIO, digest: str, where: str = "") -> int:
        """Re-hash the open blob ``handle`` (unless this very file was) against ``digest``;
        its size. The handle is left at its start.

        Raises:
            BlobError: its content does not match.
        """
        identity = file_identity(handle)
        with self._lock:
            if self._seen.get(digest) == identity:
                return identity[2]
        actual = hash_file(handle)
        handle.seek(0)
        if actual != digest:
            raise blob_changed(digest, actual, where)
        with self._lock:
            self._seen[digest] = identity
        return identity[2]


def file_identity(handle: BinaryIO) -> tuple[int, int, int, int, int]:
    """Device, inode, size, mtime and ctime of an open file: any write to it changes one."""
    info = os.fstat(handle.fileno())
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def hash_file(handle: BinaryIO) -> str:
    """The sha256 of what is left in ``handle``, read in 1 MiB chunks."""
    summed = hashlib.sha256()
    for chunk in iter(lambda: handle.read(1 << 20), b""):
        summed.update(chunk)
    return summed.hexdigest()


def blob_changed(digest: str, actual: str, where: str = "") -> BlobError:
    """The error for a blob whose content hashes to ``actual``, not to its name."""
    what = f"the recorded {where}" if where else f"blob {digest}"
    return BlobError(
        f"{what} was changed after it was recorded: blob {digest} now hashes to {actual};"
        " its content is not shown",
        hint="run `stockade verify` to check the whole record",
        details={"blob": digest, "actual": actual, "where": where},
    )


def blob_missing(digest: str, error: OSError, where: str = "") -> BlobError:
    """The error for a blob that cannot be opened."""
    what = f"the recorded {where}" if where else f"blob {digest}"
    return BlobError(
        f"{what} is missing: blob {digest} cannot be read ({error.strerror})",
        hint="run `stockade verify` to check the whole record",
        details={"blob": digest, "where": where, "error": error.strerror or str(error)},
    )


def expected_size(stream: object, digest: str) -> int | None:
    """The size a ``result`` event's ``stream`` says blob ``digest`` has: its
    ``total_bytes`` when the blob holds the stream as it was (its ``sha256`` is the blob's
    name; a redacted one differs), else ``None``."""
    if not isinstance(stream, dict) or stream.get("sha256") != digest:
        return None
    size = stream.get("total_bytes")
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def open_blob_file(store: Store, digest: str, where: str = "", size: int | None = None) -> BinaryIO:
    """Blob ``digest``'s own file, open for reading, unchecked: a regular file, not through
    a symbolic link (a FIFO or a device put in its place would hang or never end a read),
    and ``size`` bytes long when the record says (:func:`expected_size`): a blob grown in
    place (a sparse file of gigabytes costs its forger nothing) is refused before a byte
    of it is read or copied.

    Raises:
        BlobError: it is missing, or is not a regular file.
    """
    import stat

    path = blob_path(store, digest)
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except OSError as error:
        raise blob_missing(digest, error, where) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise blob_missing(digest, OSError(0, "not a regular file"), where)
    if size is not None and info.st_size != size:
        os.close(fd)
        what = f"the recorded {where}" if where else f"blob {digest}"
        raise BlobError(
            f"{what} was changed after it was recorded: blob {digest} is {info.st_size}"
            f" bytes, and its result says {size}; its content is not shown",
            hint="run `stockade verify` to check the whole record",
            details={"blob": digest, "actual": f"{info.st_size} bytes", "where": where},
        )
    return os.fdopen(fd, "rb")


def check_blob(store: Store, digest: str, where: str = "", size: int | None = None) -> int:
    """Re-hash blob ``digest`` whole against its name (``size``: see
    :func:`open_blob_file`); its size.

    Raises:
        BlobError: it is missing or its content does not match.
    """
    with open_blob_file(store, digest, where, size) as handle:
        return CheckedBlobs().check(handle, digest, where)


SPOOL_BYTES = 64 << 20  # a blob up to this size is checked in memory; a larger one is spooled


def open_blob(store: Store, digest: str, where: str = "", size: int | None = None) -> BinaryIO:
    """Blob ``digest``, open at its start, its whole content checked against its name first.
    What is returned cannot change afterwards: it is a copy (in memory, or spooled to an
    unnamed temporary file), so a checked blob is exactly the bytes that are read.

    Raises:
        BlobError: it is missing or its content does not match (nothing of it is returned).
    """
    import io
    import tempfile

    with open_blob_file(store, digest, where, size) as handle:
        if os.fstat(handle.fileno()).st_size <= SPOOL_BYTES:
            data = handle.read()
            actual = hashlib.sha256(data).hexdigest()
            if actual != digest:
                raise blob_changed(digest, actual, where)
            return io.BytesIO(data)
        spool = tempfile.TemporaryFile()  # noqa: SIM115 - handed to the caller
        summed = hashlib.sha256()
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            summed.update(chunk)
            spool.write(chunk)
    if summed.hexdigest() != digest:
        spool.close()
        raise blob_changed(digest, summed.hexdigest(), where)
    spool.seek(0)
    return spool


def get_blob(store: Store, digest: str, where: str = "") -> bytes:
    """The whole content of blob ``digest``, checked against its name.

    Raises:
        BlobError: it is missing or its content does not match.
    """
    with open_blob(store, digest, where) as handle:
        return handle.read()
