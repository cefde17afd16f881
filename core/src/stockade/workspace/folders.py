"""Agent workspaces: a folder of each configured agent's own, used by one run at a time.

A profile in ``[agents.NAME]`` works in its ``workspace``, or, when it names none, in a
folder of its own under the store (``$XDG_STATE_HOME/stockade/workspaces/NAME``, made
``0700`` on first use) that is kept between runs. A named folder must pass the rule of
writable roots (:mod:`stockade.confine.roots`): no system folder, home, or store. The built-in
``default`` profile, for a person at the CLI, keeps working in the current directory.

One run at a time: while a command of a run executes in an agent's workspace, the run holds
an exclusive ``flock`` on a lock file beside the store; a command of another run in the
same workspace is refused with the holder's run id. Steps of one run share the lock (an
agent loop may run several at once); it is released when the last of them ends.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import threading
from collections.abc import Iterator

from .. import resolved
from ..config.schema import Config, store_folder
from ..errors import StockadeError
from ..request.spec import Profile
from ..trees import again, empty, remove_tree  # without recursion: commands write these trees
from ..trees import walk as walk_tree


class WorkspaceBusy(StockadeError):
    """Another run is executing a command in this workspace; this one did not run."""

    code = "workspace_busy"


def has_own(config: Config, name: str) -> bool:
    """Whether the profile ``name`` is an agent's, with a workspace of its own and its lock:
    a configured one other than ``default``, which is a person's."""
    return name != "default" and name in config.agents


def workspace_of(config: Config, profile: Profile, *, own: bool | None = None) -> str | None:
    """The workspace of ``profile``: its named folder, its own under the store, or ``None``
    (the current directory) for a profile that is not configured. ``own`` is
    :func:`has_own` when the caller already knows it.

    Raises:
        UnsafeRoot: the named folder can never be a writable root (:mod:`stockade.confine.roots`):
            a system folder, a home, a folder holding one, the store, ...
    """
    if profile.workspace:
        return _check_named(profile.workspace, config, profile.name)
    if not (has_own(config, profile.name) if own is None else own):
        return None  # a person's own profile works where they are
    folder = os.path.join(store_folder(config), "workspaces", profile.name)
    os.makedirs(os.path.dirname(folder), mode=0o700, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    return resolved.realpath(folder)


def _check_named(folder: str, config: Config, name: str) -> str:
    """The named workspace, resolved: a writable root, so :mod:`stockade.confine.roots` decides
    whether it may be one, in any mode."""
    from ..confine.roots import RootRules

    return RootRules.of(config, os.environ).check(
        folder,
        role=f"agents.{name}.workspace",
        hint="name a project folder, or leave workspace unset for a folder of its own",
    )


class Locks:
    """The workspace locks one run (one host) holds."""

    def __init__(self, config: Config, run_id: str) -> None:
        self.folder = os.path.join(store_folder(config), "locks")
        self.run_id = run_id
        self._held: dict[str, tuple[int, int]] = {}  # workspace -> (fd, users)
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def hold(self, workspace: str) -> Iterator[None]:
        """Hold ``workspace`` for this run while the body runs.

        Raises:
            WorkspaceBusy: another run holds it.
        """
        self._acquire(workspace)
        try:
            yield
        finally:
            self._release(workspace)

    def _acquire(self, workspace: str) -> None:
        with self._lock:
            held = self._held.get(workspace)
            if held is not None:
                self._held[workspace] = (held[0], held[1] + 1)
                return
            os.makedirs(self.folder, mode=0o700, exist_ok=True)
            name = hashlib.sha256(workspace.encode()).hexdigest()[:32] + ".lock"
            path = os.path.join(self.folder, name)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another run"
                os.close(fd)
                raise WorkspaceBusy(
                    f"workspace {workspace} is in use by run {holder}; one run at a time",
                    hint="wait for that run's command to end, or use another agent profile",
                    details={"workspace": workspace, "holder": holder},
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, self.run_id.encode(), 0)
            self._held[workspace] = (fd, 1)

    def _release(self, workspace: str) -> None:
        with self._lock:
            fd, users = self._held[workspace]
            if users > 1:
                self._held[workspace] = (fd, users - 1)
                return
            del self._held[workspace]
            os.ftruncate(fd, 0)
            os.close(fd)  # closing drops the flock


def usage(folder: str) -> tuple[int, int]:
    """Bytes and files under ``folder`` (symlinks not followed; see :func:`statuses`),
    measured again when a folder moved meanwhile (:func:`stockade.trees.again`)."""

    def count() -> tuple[int, int]:
        size = files = 0
        for info in statuses(folder):
            if not stat.S_ISDIR(info.st_mode):
                size += info.st_size
                files += 1
        return size, files

    return again(count)


def statuses(folder: str, *, strict: bool = False) -> Iterator[os.stat_result]:
    """The status of every entry under ``folder`` (not ``folder`` itself), links not
    followed: what a quota counts.

    The walk (:func:`stockade.trees.walk`) holds each folder by descriptor, reads every
    status relative to it, and enters a subfolder by ``O_DIRECTORY | O_NOFOLLOW`` from its
    parent's descriptor: a folder swapped for a link while it is walked is not entered
    (``ELOOP``), so no file outside ``folder`` is counted, and a link to a FIFO never blocks
    it. It is not recursive and holds at most :data:`~stockade.trees.WINDOW` descriptors
    however deep the command made the tree (one per level would run out of them, and
    leave what lies deeper uncounted). An entry gone or unreadable holds nothing to count.

    ``strict`` (a quota's measure): an entry or a folder the host may not look at (a
    command made a folder ``600`` or ``000``, and the host is not root) raises instead, since
    what it holds is unknown.

    Raises:
        OSError: a folder moved while it was walked (the command is running): the measure
            was cut short there, and must be taken again (never taken as whole: a command
            that keeps moving a folder would hide what sorts after it); or, ``strict``,
            something could not be looked at.
    """

    def refused(_depth: int, name: str) -> None:
        if strict:
            raise PermissionError(errno.EACCES, "a folder the host may not open", name)

    for visit in walk_tree(resolved.realpath(folder), refused=refused):  # (the root: caller's)
        for name in (*visit.folders, *visit.others):
            try:
                yield os.stat(name, dir_fd=visit.fd, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone since it was listed: nothing to count
            except OSError:
                if strict:
                    raise


def clear(folder: str) -> int:
    """Empty ``folder``; how many entries were removed."""
    return empty(folder)


# --- run homes and caches ----------------------------------------------------------------

CACHE_ENV = {
    "PIP_CACHE_DIR": "pip",
    "npm_config_cache": "npm",
    "GOCACHE": "go-build",
    "GOMODCACHE": "go-mod",
}
"""The package caches an agent keeps between runs: the variable that names each, and its
folder in the agent's cache."""


def cache_of(config: Config, name: str) -> str:
    """The agent ``name``'s package caches, kept between runs (made ``0700``)."""
    root = os.path.join(store_folder(config), "caches", name)
    for sub in CACHE_ENV.values():
        os.makedirs(os.path.join(root, sub), mode=0o700, exist_ok=True)
    return resolved.realpath(root)


def clear_caches(config: Config, name: str) -> int:
    """Empty the agent ``name``'s package caches; how many entries were removed."""
    cache = cache_of(config, name)
    return sum(clear(os.path.join(cache, sub)) for sub in CACHE_ENV.values())


class Home:
    """A fresh, empty home folder for one run, removed when the run ends.

    It lives under the store (``homes/RUN``), beside a lock file the run holds while it
    lasts; a home whose lock nobody holds was left by a run that died, and is removed
    when the next home is made.
    """

    def __init__(self, config: Config, run_id: str) -> None:
        parent = os.path.join(store_folder(config), "homes")
        os.makedirs(parent, mode=0o700, exist_ok=True)
        self.path = os.path.join(parent, run_id)
        self._lock = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.mkdir(self.path, 0o700)
        self.path = resolved.realpath(self.path)
        _sweep(parent, keep=run_id)

    def remove(self) -> None:
        """Remove the home and everything in it; the run is over."""
        remove_tree(self.path)
        with contextlib.suppress(OSError):
            os.unlink(self.path + ".lock")
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1


def _sweep(parent: str, *, keep: str) -> None:
    """Remove the homes of runs that ended without removing theirs."""
    for entry in os.scandir(parent):
        if not entry.name.endswith(".lock") or entry.name == keep + ".lock":
            continue
        try:
            fd = os.open(entry.path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # its run is still going
        finally:
            os.close(fd)
        remove_tree(entry.path[: -len(".lock")])
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
