"""File tools: read and write files beneath a workspace, through a handle not walked out of.

A :class:`Workspace` opens its root directory once (``O_PATH | O_DIRECTORY``) and resolves
every path relative to that descriptor, never by joining strings. Two resolvers do it:

``openat2``
    Linux 5.6 and later: one ``openat2(2)`` call with ``RESOLVE_BENEATH |
    RESOLVE_NO_MAGICLINKS`` (and ``RESOLVE_NO_SYMLINKS`` for writes). The kernel refuses any
    step that would leave the root -- an absolute symlink, a ``..`` above it, a
    ``/proc/<pid>/root``-style magic link -- atomically, with no window for a rename to
    redirect it.
``walk``
    Older kernels, and a seccomp filter that refuses the syscall (``ENOSYS`` / ``EPERM``):
    a component-by-component walk, each step ``os.open(name, O_PATH | O_NOFOLLOW,
    dir_fd=parent)`` from a descriptor already held. A symlink is never followed by the
    kernel; for reads the walk reads its target and resolves it itself with the rules of
    ``RESOLVE_BENEATH`` (an absolute target is refused, ``..`` pops a descriptor it holds
    and is refused at the root, at most 40 links), so both resolvers accept and refuse the
    same paths.

``Workspace.resolver`` says which is in use; ``Workspace(root, resolver="walk")`` forces the
walk. The ``openat2`` call is hand-written with :mod:`ctypes`: Python's :mod:`os` has no
``openat2``, and no well-kept library wraps it (the few that exist are unmaintained or pull
in a compiler), while the call itself is one struct and one ``syscall(2)``.

The rules, the same for both resolvers:

- A path is relative to the workspace. Absolute paths, NUL bytes, empty paths and
  components over 255 bytes are refused with :class:`~stockade.errors.UsageError`.
- ``..`` in a path is resolved lexically first (``a/../b`` is ``b``); one that would climb
  above the root is refused. ``..`` inside a symlink's target is resolved physically,
  relative to the link, and refused at the root.
- Reads and listings follow symlinks whose target stays inside the workspace; a symlink that
  points out (absolute, or climbing above the root) fails. Writes follow no symlink at all,
  so the path written is the path checked.
- Nothing is written where a component is ``.git`` or one of
  :data:`stockade.confine.protected.AGENT_CONFIG` (compared without case, for case-folding
  filesystems). A ``gitdir:`` file's target is either outside the workspace (unreachable)
  or inside a ``.git`` (refused).
- Writes are atomic: a temp file in the same directory (``O_EXCL``), ``fsync``, then
  ``rename`` within the directory's descriptor, then ``fsync`` of the directory. A failure
  at any step removes the temp file and leaves the old content whole.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Literal

from .. import resolved
from ..confine import protected
from ..errors import BadCwd, Unsupported, UsageError
from . import writing
from .file_types import (
    _DIR_FLAGS,
    _PATH_DIR_FLAGS,
    _PROTECTED,
    _READ_FLAGS,
    LIST_LIMIT,
    MAX_SYMLINKS,
    READ_LIMIT,
    SNIFF_BYTES,
    WRITE_LIMIT,
    Entry,
    Kind,
    Listing,
    ReadResult,
    WriteResult,
    _refuse_masked,
)
from .openat2 import (
    _RESOLVE_BENEATH,
    _RESOLVE_NO_MAGICLINKS,
    _RESOLVE_NO_SYMLINKS,
    Resolver,
    _components,
    _display,
    _link_target,
    _openat2,
    _refusal,
    openat2_available,
)
from .sniff import _guess, _is_binary, _sha256_fd


class Workspace:
    """A directory that paths are resolved beneath, through a descriptor held open.

    Args:
        root: the workspace directory (a symlink to it is followed once, here).
        resolver: ``"auto"`` (``openat2`` where the kernel has it, else the walk),
            ``"openat2"`` (refused with :class:`~stockade.errors.Unsupported` where it is
            missing) or ``"walk"``.
        quota_mb: the workspace's quota: a write that would take it over is refused.

    Raises:
        BadCwd: ``root`` does not exist or is not a directory.
    """

    resolver: Resolver

    def __init__(
        self,
        root: str,
        *,
        resolver: Literal["auto", "openat2", "walk"] = "auto",
        quota_mb: int | None = None,
    ) -> None:
        self._fd = -1
        self.quota_mb = quota_mb
        if resolver not in ("auto", "openat2", "walk"):
            raise UsageError(f"unknown resolver {resolver!r}; use auto, openat2 or walk")
        try:
            fd = os.open(root, _PATH_DIR_FLAGS)
        except OSError as error:
            raise BadCwd(
                f"workspace {root} is not a directory: {error.strerror}",
                hint="create the directory, or name an existing one",
                details={"path": root},
            ) from None
        self.root = resolved.realpath(root)
        if resolver == "walk":
            self.resolver = "walk"
        elif openat2_available(fd):
            self.resolver = "openat2"
        elif resolver == "openat2":
            os.close(fd)
            raise Unsupported(
                "this kernel (or a seccomp filter) refuses openat2",
                hint="use resolver='auto' or 'walk'",
            )
        else:
            self.resolver = "walk"
        self._fd = fd

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Close the root descriptor; the workspace takes no more calls."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def __repr__(self) -> str:
        return f"Workspace({self.root!r}, resolver={self.resolver!r})"

    def _root(self) -> int:
        if self._fd < 0:
            raise UsageError("the workspace is closed")
        return self._fd

    # -- resolution ---------------------------------------------------------------------

    def _open(self, parts: list[str], flags: int, *, follow: bool) -> int:
        """Open ``parts`` beneath the root with ``flags``; symlinks followed only inside."""
        root = self._root()
        if self.resolver == "openat2":
            resolve = _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS
            if not follow:
                resolve |= _RESOLVE_NO_SYMLINKS
            return _openat2(root, _display(parts), flags, resolve)
        return self._walk(root, parts, flags, follow=follow)

    @staticmethod
    def _walk(root: int, parts: list[str], flags: int, *, follow: bool) -> int:
        """The walk resolver: one ``O_NOFOLLOW`` step at a time from held descriptors."""
        stack: list[int] = []  # descriptors opened here; the root is below them
        todo = list(reversed(parts))
        links = 0
        try:
            while True:
                parent = stack[-1] if stack else root
                while todo and todo[-1] in ("", "."):
                    todo.pop()
                if not todo:
                    return os.open(".", flags | os.O_CLOEXEC, dir_fd=parent)
                name = todo.pop()
                if name == "..":
                    if not stack:
                        raise OSError(errno.EXDEV, "climbs above the workspace")
                    os.close(stack.pop())
                    continue
                last = not any(part not in ("", ".") for part in todo)
                step = flags if last else _PATH_DIR_FLAGS
                try:
                    fd = os.open(name, step | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
                except OSError as error:
                    target = _link_target(parent, name, error, follow=follow)
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise OSError(errno.ELOOP, "too many symlinks", name) from None
                    todo.extend(reversed(target.split("/")))
                    continue
                if last:
                    return fd
                stack.append(fd)
        finally:
            for fd in stack:
                os.close(fd)

    def _parent(self, parts: list[str], *, make: bool) -> int:
        """An ``O_PATH`` descriptor of the directory holding ``parts[-1]``, made if asked.

        Parents are found with the resolver, following no symlink; when one is missing and
        ``make`` is set, they are made with ``mkdir(dir_fd=...)`` one step at a time, each
        reopened with ``O_NOFOLLOW`` so that a symlink planted between the two is refused.
        """
        where = _display(parts[:-1])
        try:
            return self._open(parts[:-1], _PATH_DIR_FLAGS, follow=False)
        except OSError as error:
            if not (make and error.errno == errno.ENOENT):
                raise _refusal(where, error) from None
        fd = os.dup(self._root())
        try:
            for name in parts[:-1]:
                try:
                    nxt = os.open(name, _PATH_DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o755, dir_fd=fd)
                    nxt = os.open(name, _PATH_DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nxt
        except OSError as error:
            os.close(fd)
            raise _refusal(where, error) from None
        return fd

    # -- the tools ----------------------------------------------------------------------

    def file_list(self, path: str = ".", *, limit: int = LIST_LIMIT) -> Listing:
        """The entries of directory ``path``: names, kinds and sizes, sorted by name.

        Raises:
            UsageError: the path is refused, missing, not a directory, or leads out.
        """
        if limit < 1:
            raise UsageError(f"limit must be at least 1, not {limit}")
        parts = _components(path)
        shown = _display(parts)
        try:
            fd = self._open(parts, _DIR_FLAGS, follow=True)
        except OSError as error:
            raise _refusal(shown, error) from None
        try:
            entries = sorted(self._entries(fd), key=lambda entry: entry.name)
        except OSError as error:
            raise _refusal(shown, error) from None
        finally:
            os.close(fd)
        return Listing(path=shown, entries=tuple(entries[:limit]), truncated=len(entries) > limit)

    @staticmethod
    def _entries(fd: int) -> Iterator[Entry]:
        with os.scandir(fd) as it:
            for item in it:
                try:
                    info = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # removed since it was listed
                mode = info.st_mode
                kind: Kind
                if stat.S_ISLNK(mode):
                    kind = "symlink"
                elif stat.S_ISDIR(mode):
                    kind = "dir"
                elif stat.S_ISREG(mode):
                    kind = "file"
                else:
                    kind = "other"
                yield Entry(item.name, kind, 0 if kind == "dir" else info.st_size)

    def file_read(
        self,
        path: str,
        *,
        offset: int = 0,
        limit: int = READ_LIMIT,
        check: Callable[[str], None] | None = None,
    ) -> ReadResult:
        """Up to ``limit`` bytes of file ``path`` from ``offset``, as text; binary is described.

        A file with a NUL byte or invalid UTF-8 in its first 8 KiB is binary: its size,
        sha256 and a guess of its type are returned instead of its content. Text is cut
        before a character split by the limit, so ``offset + returned`` is where the next
        call starts; invalid UTF-8 past the first 8 KiB is shown as U+FFFD. ``check``: as
        :meth:`file_bytes`'s.

        Raises:
            UsageError: the path is refused, missing, not a regular file, or leads out;
                ``offset`` is negative or ``limit`` is not in 1..256 KiB.
        """
        if offset < 0:
            raise UsageError(f"offset must be 0 or more, not {offset}")
        if not 1 <= limit <= READ_LIMIT:
            raise UsageError(
                f"limit must be between 1 and {READ_LIMIT} bytes, not {limit}",
                hint="read a large file in parts, with offset",
            )
        parts = _components(path)
        shown = _display(parts)
        fd, size = self._regular(parts, shown)
        try:
            if check is not None:
                check(_opened(fd, self.root))
            head = os.pread(fd, SNIFF_BYTES, 0)
            if _is_binary(head, whole=len(head) < SNIFF_BYTES):
                digest, size = _sha256_fd(fd)
                description = (
                    f"binary file, {size} bytes, sha256 {digest}, "
                    f"looks like {_guess(head, parts[-1] if parts else '')}"
                )
                return ReadResult(shown, None, True, size, offset, 0, False, description)
            data = os.pread(fd, limit, offset)
            at_end = offset + len(data) >= size or len(data) < limit
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            text = decoder.decode(data, final=at_end)
            pending = decoder.getstate()[0]
            returned = len(data) - len(pending)
            return ReadResult(
                shown, text, False, size, offset, returned, offset + returned < size, None
            )
        except OSError as error:
            raise _refusal(shown, error) from None
        finally:
            os.close(fd)

    def file_bytes(
        self,
        path: str,
        *,
        offset: int = 0,
        limit: int = READ_LIMIT,
        check: Callable[[str], None] | None = None,
    ) -> bytes:
        """Up to ``limit`` bytes of file ``path`` from ``offset``, exactly as stored, text or
        binary (empty past the end); refused as :meth:`file_read` refuses.

        ``check``, if given, gets the opened file's path (from its descriptor: no symlink
        swapped since can steer it) before a byte is read; what it raises refuses the read.

        Raises:
            UsageError: as :meth:`file_read`.
        """
        if offset < 0 or not 1 <= limit <= READ_LIMIT:
            raise UsageError(
                f"offset must be 0 or more and limit 1..{READ_LIMIT} bytes, not {offset}, {limit}"
            )
        parts = _components(path)
        shown = _display(parts)
        fd, _ = self._regular(parts, shown)
        try:
            if check is not None:
                check(_opened(fd, self.root))
            return os.pread(fd, limit, offset)
        except OSError as error:
            raise _refusal(shown, error) from None
        finally:
            os.close(fd)

    def _regular(self, parts: list[str], shown: str) -> tuple[int, int]:
        """A descriptor of the regular file ``parts`` names (one name only, not in a
        credential store) and its size; the caller closes it."""
        try:
            fd = self._open(parts, _READ_FLAGS, follow=True)
        except OSError as error:
            raise _refusal(shown, error) from None
        try:
            _refuse_masked(fd, shown)
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise UsageError(f"path {shown!r} is a directory", hint="list it with file_list")
            if not stat.S_ISREG(info.st_mode):
                raise UsageError(f"path {shown!r} is not a regular file")
            if info.st_nlink > 1:
                # A second name may be outside the workspace: a path check cannot see it.
                raise UsageError(
                    f"path {shown!r} has {info.st_nlink} hard links; the file tools read only "
                    "files with one name, since another could lie outside the workspace",
                    hint="copy the file inside the workspace, or read it with a command",
                    details={"path": shown, "rule": "hard-link"},
                )
        except OSError as error:
            os.close(fd)
            raise _refusal(shown, error) from None
        except BaseException:
            os.close(fd)
            raise
        return fd, info.st_size

    def file_write(
        self, path: str, content: str | bytes, *, make_parents: bool = True
    ) -> WriteResult:
        """Replace file ``path`` with ``content`` (UTF-8 when a string), atomically.

        The old file, if any, is never opened for writing: a temp file in the same
        directory takes the content, is flushed to disk and renamed over it, so a reader
        sees the old file or the new one and a crash leaves one of the two. Unchanged
        content is not rewritten (``changed`` is false).

        Raises:
            UsageError: the path is refused (absolute, ``..`` out, ``.git`` or agent
                config, through a symlink), names a directory or a non-regular file, a
                parent is missing and ``make_parents`` is false, or the content is over 1 MiB.
            QuotaExceeded: the write would take the workspace over its ``quota_mb``.
            StockadeError: the disk refused the write (full, read-only, I/O error); the
                old file is untouched.
        """
        parts = _components(path)
        shown = _display(parts)
        if not parts:
            raise UsageError("cannot write the workspace root itself; name a file")
        for part in parts:
            if part.lower() in _PROTECTED:
                raise UsageError(
                    f"path {shown!r} is inside protected {part!r}: file_write never writes "
                    "in .git or agent/editor configuration",
                    hint="these stay read-only so that nothing planted there runs later",
                    details={"path": shown, "rule": "protected", "component": part},
                )
        # Dotfiles, run-later folders, credential stores: as in a sandbox
        # (stockade.confine.protected).
        if protected.enclosing(os.path.join(self.root, *parts)) is not None:
            raise UsageError(
                f"path {shown!r} is a protected name (a dotfile, a folder whose entries run "
                "later, or a credential store): file_write never writes it",
                hint="a person edits these files themselves",
                details={"path": shown, "rule": "protected"},
            )
        if isinstance(content, str):
            try:
                data = content.encode("utf-8")
            except UnicodeEncodeError as error:
                raise UsageError(f"content for {shown!r} is not valid Unicode: {error}") from None
        else:
            data = bytes(content)
        if len(data) > WRITE_LIMIT:
            raise UsageError(
                f"content for {shown!r} is {len(data)} bytes, over the {WRITE_LIMIT}-byte limit",
                details={"path": shown, "size": len(data), "limit": WRITE_LIMIT},
            )
        name = parts[-1]
        new_sha = hashlib.sha256(data).hexdigest()
        parent = self._parent(parts, make=make_parents)
        try:
            old_sha, old_size, old_mode = writing.old(parent, name, shown)
            if old_sha == new_sha:
                at = writing.where(self._root(), parent, name)
                return WriteResult(shown, False, old_size, len(data), old_sha, new_sha, False, at)
            self._fits(shown, len(data) - (old_size or 0))
            writing.replace(parent, name, data, old_mode, shown)
            where = writing.where(self._root(), parent, name)
        finally:
            os.close(parent)
        return WriteResult(
            shown, old_sha is None, old_size, len(data), old_sha, new_sha, True, where
        )

    def _fits(self, shown: str, growth: int) -> None:
        """Refuse a write that would take the workspace over its quota."""
        if self.quota_mb is None or growth <= 0:
            return
        from ..run.quota import MIB, QuotaExceeded, describe, usage

        used, limit = usage(self.root), self.quota_mb * MIB
        if used + growth > limit:
            raise QuotaExceeded(
                f"writing {shown!r} ({growth} more bytes) would take the workspace over its "
                f"quota: it holds {describe(used, limit)}",
                hint="remove files from the workspace first, or raise the profile's quota_mb",
                details={"path": shown, "used": used, "limit": limit, "growth": growth},
            )


def _opened(fd: int, root: str) -> str:
    """Where the file open as ``fd`` is, relative to ``root`` (from the descriptor)."""
    return os.path.relpath(os.readlink(f"/proc/self/fd/{fd}"), root)
