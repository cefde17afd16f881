"""Opening the store: several hosts opening one fresh store at the same moment all get it
(a server's first call races its prewarm; CI saw ``cannot open the store: database is
locked`` from SQLite's journal-mode switch, which skips the busy handler)."""

from __future__ import annotations

import threading
from pathlib import Path

from stockade.record.store import Store


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
