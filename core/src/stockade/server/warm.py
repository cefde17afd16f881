"""The server's warm hosts: one per configuration, each lending a run of its own to a call.

A warm host keeps what is slow to make (the plugin manager and its entry-point scan, the
providers and their probes, the executor, the open store); a call gets
:meth:`~stockade.host.Host.for_run` of it with the caller's environment and folder, so each
CLI call is a run of its own as before. A config file that changed (its size, mtime or
inode) or another environment (the plugins are made with it: the built-in broker reads
secrets from it) gives a new warm host: a changed file is picked up without a restart.
Variables that differ between two shells of one person (``PWD``, ``SHLVL``, ...) do not count.

Old warm hosts are closed (:class:`WarmHosts`: a bound, an idle time, never one in use).
The server's kept watches (:class:`~stockade.run.kept.Watches`) are made here and handed to
every warm host's doer; :mod:`stockade.run.kept` does the watching, the server only decides
when they are swept and closed.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..run.kept import Watches

if TYPE_CHECKING:
    from ..host import Host

KEEP = 4
"""Warm hosts kept at most while no call uses them; past that, the least recently used goes."""

IDLE = 300.0
"""Seconds after which a warm host no call has used is closed."""


class _Warm:
    """One warm host, and what keeps it open."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.users = 0  # calls using it (or a run made from it) now
        self.runs = 0  # kept runs made from it: they live until the server exits
        self.used = time.monotonic()

    def evictable(self) -> bool:
        return not self.users and not self.runs


class WarmHosts:
    """Warm hosts by configuration, with the server's kept watches (:mod:`stockade.run.kept`).

    Eviction: a warm host no call is using and that holds no kept run (a run that spans
    calls, and so its tasks) is closed once unused for ``idle`` seconds (:meth:`sweep`),
    and, past ``keep`` hosts, the least recently used such host is closed at once. A host in
    use is never closed, whatever the count.
    """

    def __init__(self, *, keep: int = KEEP, idle: float = IDLE) -> None:
        self.keep, self.idle = keep, idle
        self.watches = Watches()
        self._hosts: dict[tuple[object, ...], _Warm] = {}
        self._runs: dict[tuple[object, ...], tuple[Host, _Warm]] = {}
        self._lock = threading.Lock()

    def host(
        self,
        config: str | None,
        environ: Mapping[str, str],
        cwd: str,
        run: str | None = None,
        *,
        holds: list[_Warm] | None = None,
    ) -> Host:
        """A run on the warm host for ``config`` (``--config``) and ``environ``: a run of
        its own, or the kept run named ``run`` (made on its first call; its steps go on
        from the last one the store has for it), which spans calls until the server exits.
        The warm host it shares is counted as in use until ``holds`` is given to
        :meth:`release` (without ``holds``, until it is closed with the rest).

        Raises:
            ConfigError: the configuration is invalid (nothing is kept for it).
        """
        from ..config.load import config_path, load_config
        from ..host import Host

        path = config if config is not None else config_path(environ)
        key = _key(path, environ, cwd)
        with self._lock:
            warm = self._hosts.get(key)
            if warm is None:
                host = Host(load_config(path, environ=environ, cwd=cwd), environ=environ)
                host.doer.watches = self.watches
                warm = self._hosts[key] = _Warm(host)
            if run is None:
                found = warm.host.for_run(environ=environ, cwd=cwd)
            else:
                # A run is named per configuration, whatever environment a call comes from.
                kept = self._runs.get((*key[1:-1], run))
                if kept is None:
                    made = warm.host.for_run(environ=environ, run_id=run)
                    made.kept = True
                    made.resume_steps()
                    warm.runs += 1
                    kept = self._runs[(*key[1:-1], run)] = (made, warm)
                found, warm = kept
            if holds is not None:
                warm.users += 1
                holds.append(warm)
            warm.used = time.monotonic()
            gone = self._over()
        _close(gone)
        return found

    def release(self, holds: list[_Warm]) -> None:
        """The call that held these warm hosts (:meth:`host`'s ``holds``) has ended."""
        now = time.monotonic()
        with self._lock:
            for warm in holds:
                warm.users -= 1
                warm.used = now
            holds.clear()
            gone = self._over()
        _close(gone)

    def _over(self) -> list[Host]:
        """Take out the least recently used idle hosts past ``keep`` (under the lock)."""
        excess = len(self._hosts) - self.keep
        if excess <= 0:
            return []
        idle = sorted((w.used, i) for i, w in enumerate(self._hosts.values()) if w.evictable())
        chosen = {i for _, i in idle[:excess]}
        keys = [k for i, k in enumerate(self._hosts) if i in chosen]
        return [self._hosts.pop(k).host for k in keys]

    def sweep(self) -> int:
        """Close the warm hosts unused for ``idle`` seconds, and the kept watches unused
        for theirs; how many warm hosts are left."""
        now = time.monotonic()
        with self._lock:
            old = [k for k, w in self._hosts.items() if w.evictable() and now - w.used > self.idle]
            gone = [self._hosts.pop(k).host for k in old]
            left = len(self._hosts)
        _close(gone)
        self.watches.sweep()
        return left

    def hosts(self) -> list[Host]:
        """The warm hosts kept now, least recently used first."""
        with self._lock:
            return [w.host for w in sorted(self._hosts.values(), key=lambda w: w.used)]

    def running(self) -> int:
        """How many background tasks of the kept runs are running now."""
        with self._lock:
            runs = [run for run, _ in self._runs.values()]
        return sum(run.running() for run in runs)

    def close(self) -> None:
        """Close every kept run (killing its tasks), then every warm host and watch."""
        with self._lock:
            runs, self._runs = [run for run, _ in self._runs.values()], {}
            hosts, self._hosts = [w.host for w in self._hosts.values()], {}
        for run in runs:
            run.kept = False
            run.close()
        _close(hosts)
        self.watches.close()


def _close(hosts: list[Host]) -> None:
    """Close warm hosts taken out of the table: their executor's helpers, store, recorder.
    (Proxies are a command's, closed with it; kept watches are the server's.)"""
    for host in hosts:
        host.close()


def _key(path: str | None, environ: Mapping[str, str], cwd: str) -> tuple[object, ...]:
    """A warm host's key: the configuration as the call spells it (its messages name it so,
    as an in-process run's do), the file it is, and the environment's digest. A named run's
    key leaves out the spelling and the environment (``key[1:-1]``): one run per file."""
    spelling = path
    identity: tuple[object, ...] = (None,)
    if path is not None:
        path = os.path.join(cwd, path)  # a relative --config is the caller's
        try:
            info = os.stat(path)
            identity = (os.path.realpath(path), info.st_size, info.st_mtime_ns, info.st_ino)
        except OSError:
            identity = (path, "missing")  # load_config says what is wrong
    digest = hashlib.sha256()
    for name in sorted(environ):
        if name not in VOLATILE:
            digest.update(f"{name}\0{environ[name]}\0".encode("utf-8", "surrogateescape"))
    return (spelling, *identity, digest.hexdigest())


VOLATILE = frozenset(
    {"PWD", "OLDPWD", "SHLVL", "_", "COLUMNS", "LINES", "TERM_SESSION_ID", "WINDOWID", "TMUX_PANE"}
)
"""Variables that say where a shell is, not what a host is made with."""
