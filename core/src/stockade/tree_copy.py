"""A tree of any depth copied without recursion, as :func:`shutil.copytree` copies it.

:func:`shutil.copytree` is recursive in Python 3.11: on a tree a command made deeper than
about a thousand levels (``mkdirat`` by descriptors, which ``PATH_MAX`` does not limit) it
raises ``RecursionError``, which none of its error handling catches. So :func:`copy_tree`
is written by hand, by folder descriptors like :mod:`stockade.trees` (whose chain of at
most :data:`~stockade.trees.WINDOW` open descriptors it walks both trees with): each name
is opened relative to its folder's descriptor without following a link, so a link is
copied as a link, never followed, and a name swapped meanwhile is never read through.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat

from .trees import READ_FOLDER, FolderChain, child_rel

_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20


def copy_tree(source: str, target: str, *, link: bool = False, exist_ok: bool = False) -> None:
    """Copy the folder ``source`` to ``target`` (made, with its parents), everything in it
    as ``shutil.copytree(source, target, symlinks=True)`` copies it: files with their
    metadata (:func:`shutil.copy2`; ``link``: hard-linked instead, as
    ``copy_function=os.link``), links as links (never followed), each folder's metadata
    copied once what it holds is. ``exist_ok``: folders there already are copied into
    (``dirs_exist_ok=True``), but a file or link there already is an error, never written
    through (``O_EXCL``: it may be a hard link to a file elsewhere).

    Raises:
        shutil.Error: what could not be copied (source, target, why), once all else was,
            as :func:`shutil.copytree` raises it.
        OSError: ``source`` cannot be opened as a folder, or ``target`` cannot be made.
    """
    top = os.open(source, READ_FOLDER)
    try:
        os.makedirs(target, exist_ok=exist_ok)
        into = os.open(target, READ_FOLDER)
    except BaseException:
        os.close(top)
        raise
    _Copy(source, target, top, into, link=link, exist_ok=exist_ok).run()


class _Copy:
    """One copy under way: both trees' chains, the names left at each level, the errors."""

    def __init__(
        self, source: str, target: str, top: int, into: int, *, link: bool, exist_ok: bool
    ) -> None:
        self.source, self.target = source, target
        self.src, self.dst = FolderChain(top), FolderChain(into)
        self.link, self.exist_ok = link, exist_ok
        self.errors: list[tuple[str, str, str]] = []

    def run(self) -> None:
        try:
            todo, rels = [self._listed("")], list[str | None]([""])
            while True:
                if todo[-1]:
                    name = todo[-1].pop()
                    if self._entered(rels[-1], name):
                        rel = child_rel(rels[-1], name)
                        todo.append(self._listed(rel))
                        rels.append(rel)
                    continue
                if self.src.depth == 0:
                    self._folder_stat(rels[-1], self.src.fd, self.dst.fd)
                    break
                todo.pop()
                rel = rels.pop()
                src, dst = os.dup(self.src.fd), os.dup(self.dst.fd)
                try:  # its rights copied only once out of it: ``..`` may need them
                    self.src.up()
                    self.dst.up()
                    self._folder_stat(rel, src, dst)
                finally:
                    os.close(src)
                    os.close(dst)
        finally:
            self.src.close()
            self.dst.close()
        if self.errors:
            raise shutil.Error(self.errors)

    def _listed(self, rel: str | None) -> list[str]:
        """The names in the source folder the chain is in, last first (popped in order)."""
        try:
            return sorted(os.listdir(self.src.fd), reverse=True)
        except OSError as error:
            self._failed(rel, "", error)
            return []

    def _entered(self, rel: str | None, name: str) -> bool:
        """Copy entry ``name``; whether it is a folder both chains went down into."""
        try:
            info = os.stat(name, dir_fd=self.src.fd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                self._symlink(name, info)
            elif stat.S_ISDIR(info.st_mode):
                self.src.down(name)
                try:
                    self._made(name)
                    self.dst.down(name)
                except BaseException:
                    self.src.up()
                    raise
                return True
            elif self.link:
                os.link(name, name, src_dir_fd=self.src.fd, dst_dir_fd=self.dst.fd,
                        follow_symlinks=False)  # fmt: skip
            else:
                self._file(name)
        except OSError as error:
            self._failed(rel, name, error)
        return False

    def _made(self, name: str) -> None:
        try:
            os.mkdir(name, dir_fd=self.dst.fd)
        except FileExistsError:
            if not self.exist_ok:
                raise

    def _symlink(self, name: str, info: os.stat_result) -> None:
        os.symlink(os.readlink(name, dir_fd=self.src.fd), name, dir_fd=self.dst.fd)
        with contextlib.suppress(NotImplementedError):  # a link's own times, as copystat
            os.utime(name, ns=(info.st_atime_ns, info.st_mtime_ns), dir_fd=self.dst.fd,
                     follow_symlinks=False)  # fmt: skip

    def _file(self, name: str) -> None:
        """Copy file ``name`` with its metadata (:func:`shutil.copy2`), by descriptors."""
        fd = os.open(name, _FILE, dir_fd=self.src.fd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # as copy2: no pipe, socket, device
                raise shutil.SpecialFileError(f"`{name}` is not a regular file")
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            out = os.open(name, flags, 0o600, dir_fd=self.dst.fd)
            try:
                os.set_blocking(fd, True)
                _data(fd, out)
                shutil.copystat(f"/proc/self/fd/{fd}", f"/proc/self/fd/{out}")
            finally:
                os.close(out)
        finally:
            os.close(fd)

    def _folder_stat(self, rel: str | None, src: int, dst: int) -> None:
        """The source folder's metadata onto its copy, once all it holds is copied."""
        try:
            shutil.copystat(f"/proc/self/fd/{src}", f"/proc/self/fd/{dst}")
        except OSError as error:
            self._failed(rel, "", error)

    def _failed(self, rel: str | None, name: str, error: OSError) -> None:
        where = "…" if rel is None else os.path.join(rel, name) if name else rel
        source, target = (
            os.path.join(top, where).rstrip("/") for top in (self.source, self.target)
        )
        self.errors.append((source, target, str(error)))


def _data(fd: int, out: int) -> None:
    """Every byte of ``fd`` into ``out``: by ``sendfile`` where the files take it."""
    try:
        while os.sendfile(out, fd, None, _CHUNK):
            pass
    except OSError:
        if os.lseek(out, 0, os.SEEK_CUR) != 0:  # part sent: it failed, not unsupported
            raise
        os.lseek(fd, 0, os.SEEK_SET)
        while chunk := memoryview(os.read(fd, _CHUNK)):
            while chunk:
                chunk = chunk[os.write(out, chunk) :]
