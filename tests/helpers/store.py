"""A recorded store and how the ``test_verify_*.py`` and ``test_declines.py`` files read and
change it, as someone with write access to the state folder but without the key could. The
store itself comes from the ``state``, ``env`` and ``recorded`` fixtures (tests/conftest.py)."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from helpers.server import STOCKADE
from stockade.record.blobs import blob_path
from stockade.record.chain import rows
from stockade.record.store import Store
from stockade.record.verify import Verdict, verify

TRUTH = "the truth\n"
FORGED = "forged it\n"  # as long as TRUTH: found by its hash, not its size


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*STOCKADE, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def verify_cli(store: Path, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``stockade verify`` of ``store``, in-process, with a config naming it (written to
    ``config``, by default ``config.toml`` beside the store)."""
    config = config or store.parent / "config.toml"
    config.write_text(f'[store]\npath = "{store}"\n')
    env = {"STOCKADE_CONFIG": str(config), "STOCKADE_NO_SERVER": "1", "PATH": "/usr/bin:/bin"}
    return cli("verify", env=env)


def _rows(path: Path) -> list[dict[str, Any]]:
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute("SELECT * FROM events ORDER BY seq")]
    finally:
        db.close()


def check(path: Path, **options: Any) -> Verdict:
    store = Store(str(path))
    try:
        return verify(store, **options)
    finally:
        store.close()


def sql(path: Path, statement: str, *args: object) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute(statement, args)
    db.close()


def blob_of(path: Path, run: str, step: int, stream: str = "stdout") -> Path:
    store = Store(str(path))
    try:
        [result] = [r for r in rows(store, run) if r.step == step and r.kind == "result"]
        return Path(blob_path(store, result.body["result"][stream]["blob"]))
    finally:
        store.close()


def forge(blob: Path, text: str = FORGED) -> None:
    """Write ``text`` over a blob, in place, as a tamperer would (owner-only files)."""
    blob.write_text(text)
