"""Opening the store: several hosts opening one fresh store at the same moment all get it
(a server's first call races its prewarm; CI saw ``cannot open the store: database is
locked`` from SQLite's journal-mode switch, which skips the busy handler).

Also from several processes at once, each with threads, each making the signing key: two
threads of one process made it under one temporary name (the second failed).
"""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

from stockade.config.schema import Config, StoreConfig
from stockade.record.chain import Chain
from stockade.record.store import Store, open_store


def test_many_hosts_opening_one_fresh_store_at_once_all_get_it(tmp_path: Path) -> None:
    failures: list[str] = []
    for trial in range(30):
        path = str(tmp_path / f"s{trial}" / "store.db")
        start = threading.Barrier(4)

        def open_it(path: str = path, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                Store(path).close()
            except Exception as error:  # noqa: BLE001 - each failure is the finding
                failures.append(repr(error))

        threads = [threading.Thread(target=open_it) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        mode = Store(path)
        try:
            with mode.locked():
                assert mode.connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        finally:
            mode.close()
    assert failures == []


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
