"""The server's warm hosts: one per configuration, each lending a run of its own to a call.

A warm host keeps what is slow to make (the plugin manager and its entry-point scan, the
providers and their probes, the executor, the open store); a call gets
:meth:`~stockade.host.Host.for_run` of it with the caller's environment and folder, so each
CLI call is a run of its own as before. A config file that changed (its size, mtime or
inode) or another environment (the plugins are made with it: the built-in broker reads
secrets from it) gives a new warm host: a changed file is picked up without a restart.
Variables that differ between two shells of one person (``PWD``, ``SHLVL``, ...) do not count.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..host import Host


class WarmHosts:
    """Warm hosts by configuration."""

    def __init__(self) -> None:
        self._hosts: dict[tuple[object, ...], Host] = {}
        self._runs: dict[tuple[object, ...], Host] = {}
        self._lock = threading.Lock()

    def host(
        self, config: str | None, environ: Mapping[str, str], cwd: str, run: str | None = None
    ) -> Host:
        """A run on the warm host for ``config`` (``--config``) and ``environ``: a run of
        its own, or the kept run named ``run`` (made on its first call; its steps go on
        from the last one the store has for it), which spans calls until the server exits.

        Raises:
            ConfigError: the configuration is invalid (nothing is kept for it).
        """
        from ..config.load import config_path, load_config
        from ..host import Host

        path = config if config is not None else config_path(environ)
        key = _key(path, environ)
        with self._lock:
            warm = self._hosts.get(key)
            if warm is None:
                warm = Host(load_config(path, environ=environ), environ=environ)
                self._hosts[key] = warm
            if run is None:
                return warm.for_run(environ=environ, cwd=cwd)
            # A run is named per configuration, whatever environment a call comes from.
            kept = self._runs.get((*key[:-1], run))
            if kept is None:
                kept = warm.for_run(environ=environ, run_id=run)
                kept.kept = True
                kept.resume_steps()
                self._runs[(*key[:-1], run)] = kept
            return kept

    def running(self) -> int:
        """How many background tasks of the kept runs are running now."""
        with self._lock:
            runs = list(self._runs.values())
        return sum(run.running() for run in runs)

    def close(self) -> None:
        """Close every kept run (killing its tasks), then every warm host."""
        with self._lock:
            runs, self._runs = list(self._runs.values()), {}
            hosts, self._hosts = list(self._hosts.values()), {}
        for run in runs:
            run.kept = False
            run.close()
        for host in hosts:
            host.close()


def _key(path: str | None, environ: Mapping[str, str]) -> tuple[object, ...]:
    identity: tuple[object, ...] = (None,)
    if path is not None:
        try:
            info = os.stat(path)
            identity = (os.path.realpath(path), info.st_size, info.st_mtime_ns, info.st_ino)
        except OSError:
            identity = (path, "missing")  # load_config says what is wrong
    digest = hashlib.sha256()
    for name in sorted(environ):
        if name not in VOLATILE:
            digest.update(f"{name}\0{environ[name]}\0".encode("utf-8", "surrogateescape"))
    return (*identity, digest.hexdigest())


VOLATILE = frozenset(
    {"PWD", "OLDPWD", "SHLVL", "_", "COLUMNS", "LINES", "TERM_SESSION_ID", "WINDOWID", "TMUX_PANE"}
)
"""Variables that say where a shell is, not what a host is made with."""
