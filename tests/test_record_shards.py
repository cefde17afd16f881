"""The sharded record (``stockade.record.shards``) without Ray: shard chains written beside the
main store, anchored in it; ``stockade verify`` checks each; each shard rewritten, cut past its
anchor, re-signed under another key, or never anchored fails it, naming the shard, where the
untouched copy passes (the control)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from helpers.store import verify_cli
from stockade.record.chain import Chain
from stockade.record.events import AnchorEvent, AnnotationEvent
from stockade.record.shards import head_of, shard_path, verify_shards
from stockade.record.store import Store

SHARDS = ("s0", "s1")


def _events(run: str, count: int) -> list[AnnotationEvent]:
    return [
        AnnotationEvent(f"{run}-{i}", run_id=run, step=i, name="r", score=float(i))
        for i in range(count)
    ]


def _anchor(main: Chain, name: str) -> None:
    shard = Store(shard_path(main.store, name))
    seq, digest, key = head_of(shard)
    shard.close()
    main.append(
        AnchorEvent(f"anchor-{name}-{seq}", shard=name, seq=seq, hash=digest, public_key=key)
    )


@pytest.fixture
def record(tmp_path: Path) -> Path:
    store = tmp_path / "state" / "store.db"
    main = Chain(Store(str(store)))
    main.append(AnnotationEvent("main-0", run_id="driver", name="r", verdict="pass"))
    for i, name in enumerate(SHARDS):
        path = shard_path(main.store, name)
        Path(path).parent.mkdir(parents=True)
        shard = Chain(Store(path))
        shard.append_many(_events(f"episode{i}", 5))
        shard.close()
        _anchor(main, name)
    main.close()
    return store


def _verify(store: Path) -> subprocess.CompletedProcess[str]:
    return verify_cli(store, store.parent.parent / "config.toml")


def test_every_shard_is_verified_with_the_main_chain(record: Path) -> None:
    store = Store(str(record))
    checks = verify_shards(store)
    store.close()
    assert [(c.name, c.ok, c.anchored, c.after) for c in checks] == [
        ("s0", True, 5, 0),
        ("s1", True, 5, 0),
    ]
    ran = _verify(record)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "ok: shard s0: anchored at event 5" in ran.stdout and "shard s1" in ran.stdout


@pytest.mark.parametrize("shard", SHARDS)
@pytest.mark.parametrize("how", ["rewritten", "cut", "re-signed", "unanchored"])
def test_a_shard_tampered_with_fails(record: Path, shard: str, how: str) -> None:
    assert _verify(record).returncode == 0  # the control
    path = shard_path(Store(str(record)), shard)
    if how == "rewritten":
        with sqlite3.connect(path) as db:
            db.execute("UPDATE events SET body = replace(body, '\"score\":1.0', '\"score\":9.0')")
    elif how == "cut":  # the anchored tail cut, the head file too
        with sqlite3.connect(path) as db:
            db.execute("DELETE FROM events WHERE seq = (SELECT MAX(seq) FROM events)")
        Path(path + ".head").unlink()
    elif how == "re-signed":  # a whole new history under a key of its own
        shutil.rmtree(Path(path).parent)
        Path(path).parent.mkdir()
        forged = Chain(Store(path))
        forged.append_many(_events("forged", 5))
        forged.close()
    else:  # a shard no anchor names
        stray = Path(shard_path(Store(str(record)), "stray"))
        stray.parent.mkdir()
        shutil.copy(path, stray)
        shard = "stray"
    ran = _verify(record)
    assert ran.returncode == 1, ran.stdout
    assert f"shard {shard}" in ran.stderr


def _main(record: Path) -> Chain:
    return Chain(Store(str(record)))


def test_every_anchor_is_checked_not_only_the_last(record: Path) -> None:
    """An anchor at 5 then one at 2 (written out of order): the shard cut back to 2, its
    head rebuilt from event 2's own columns, still fails on the anchor at 5."""
    main = _main(record)
    path = shard_path(main.store, "s0")
    shard = Store(path)
    with shard.locked():
        seq, digest, sig = shard.connection.execute(
            "SELECT seq, hash, sig FROM events WHERE seq=2"
        ).fetchone()
    key = head_of(shard)[2]
    shard.close()
    main.append(AnchorEvent("anchor-s0-2", shard="s0", seq=2, hash=digest, public_key=key))
    main.close()
    assert _verify(record).returncode == 0  # the control: both anchors hold
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM events WHERE seq > 2")
    Path(path + ".head").write_text(f"{seq:020d} {digest} {sig.hex()}\n")
    ran = _verify(record)
    assert ran.returncode == 1, ran.stdout
    assert "shard s0 was cut: its anchored event 5 is gone" in ran.stderr
    assert "stockade: the record does not verify: 1 problem in its shards" in ran.stderr


@pytest.mark.parametrize("name", ["../../victim", "/abs/victim", "", 7, None])
def test_an_anchor_naming_no_shard_is_reported_and_nothing_is_opened(
    record: Path, name: object
) -> None:
    victim = record.parent.parent / "victim"
    victim.mkdir()
    (victim / "store.db").write_bytes(b"not a store of ours")
    main = _main(record)
    main.append(AnchorEvent("anchor-x", shard=name, seq=1, hash="0" * 64, public_key="k"))  # type: ignore[arg-type]
    main.close()
    ran = _verify(record)
    assert ran.returncode == 1, ran.stdout
    assert f"an anchor names {name!r}, which is no shard's name" in ran.stderr
    assert (victim / "store.db").read_bytes() == b"not a store of ours"  # never opened


@pytest.mark.parametrize("how", ["not sqlite", "a folder", "fifo head", "fifo key", "bad anchor"])
def test_a_shard_that_cannot_be_read_is_its_own_problem(record: Path, how: str) -> None:
    """One unreadable shard is reported as that shard's problem, in bounded time; the other
    shard and the main chain are still checked and named."""
    import os

    path = Path(shard_path(Store(str(record)), "s0"))
    if how == "not sqlite":
        path.write_bytes(b"garbage" * 100)
    elif how == "a folder":
        path.unlink()
        path.mkdir()
    elif how == "fifo head":
        Path(f"{path}.head").unlink()
        os.mkfifo(f"{path}.head")
    elif how == "fifo key":
        (path.parent / "signing.key").unlink()
        os.mkfifo(path.parent / "signing.key")
    else:
        main = _main(record)
        main.append(AnchorEvent("anchor-bad", shard="s0", seq="x", hash=3, public_key=""))  # type: ignore[arg-type]
        main.close()
    ran = _verify(record)  # (a fifo waited on would pass the 120 s timeout)
    assert ran.returncode == 1, ran.stdout
    assert "shard s0" in ran.stderr, ran.stderr
    assert "ok: shard s1" in ran.stdout and "Traceback" not in ran.stderr, ran.stderr


def test_verify_changes_no_byte_of_any_shard(record: Path) -> None:
    """``verify`` opens the main store and every shard read-only: not a byte of any changes,
    and an older shard is reported, not migrated (the control: the writing open does)."""

    def digests() -> dict[str, bytes]:
        return {
            str(p): p.read_bytes()
            for p in sorted(record.parent.rglob("*"))
            if p.is_file() and not p.name.endswith(("-shm", "-wal"))
        }

    before = digests()
    assert _verify(record).returncode == 0
    assert digests() == before
    reader = Store(str(record), read_only=True)
    older = shard_path(reader, "s1")
    reader.close()
    db = sqlite3.connect(older)
    with db:
        db.execute("UPDATE meta SET value='1' WHERE key='schema'")
    db.close()
    before = digests()
    ran = _verify(record)
    assert ran.returncode == 1
    assert "shard s1 cannot be read" in ran.stderr and "older than this Stockade's" in ran.stderr
    assert digests() == before
    Store(older).close()  # the writing open migrates it
    assert digests() != before
    assert _verify(record).returncode == 0
