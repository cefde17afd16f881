"""Opening the store from several processes and threads at once, as a warm server's start
(its prewarm thread and its first call) and clients running in-process do.

A new store is switched to WAL when it is first opened; SQLite answers a connection that
cannot take the exclusive lock for that at once with "database is locked", without waiting
(its busy timeout does not apply), and two threads of one process made their signing key
under one temporary name. Both surfaced as a ``recorder_failed`` "cannot open the store"
under load. Each round here starts every opener at a barrier on a fresh store.
"""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

from stockade.config.schema import Config, StoreConfig
from stockade.record.chain import Chain
from stockade.record.store import open_store

PROCESSES = 4
THREADS = 3
ROUNDS = 12


def _open_all(stores: list[str], barrier, errors) -> None:
    """In a process of its own: each round, wait at the barrier, then open ``stores[round]``
    from :data:`THREADS` threads at once and record an event there."""
    found: list[str] = []

    def one(path: str) -> None:
        try:
            store = open_store(Config(store=StoreConfig(path=path)))
            try:
                Chain(store).close_orphans()
            finally:
                store.close()
        except Exception as error:  # noqa: BLE001 - every failure is the finding
            found.append(f"{type(error).__name__}: {error}")

    for path in stores:
        barrier.wait()
        threads = [threading.Thread(target=one, args=(path,)) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    errors.put(found)


def test_many_processes_and_threads_open_a_new_store_at_once(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    stores = [str(tmp_path / f"r{i}" / "store.db") for i in range(ROUNDS)]
    barrier = context.Barrier(PROCESSES)
    errors = context.Queue()
    workers = [
        context.Process(target=_open_all, args=(stores, barrier, errors)) for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    found = [error for _ in workers for error in errors.get(timeout=120)]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert found == []
    for path in stores:  # each store opens again, in WAL mode, with one signing key
        store = open_store(Config(store=StoreConfig(path=path)))
        try:
            with store.locked():
                mode = store.connection.execute("PRAGMA journal_mode").fetchone()[0]
            assert mode == "wal"
        finally:
            store.close()
        assert len(list(Path(path).parent.glob("signing.key*"))) == 1
