"""The sharded record's writers (``stockade.record.writers``): processes of the driver's own.

Shards they write verify with the main chain, and each tampered with in turn fails, naming
it (the untouched copy passes: the control). The writers are this process's children, one
a CPU at most; one killed fails the batches it had not answered and every later one, with
a store error naming its shards, while the others go on; a driver killed ends its writers;
a shard that cannot be opened or whose key is not its record's is a store error, and no
writer is left running.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers.procs import alive, wait_until
from helpers.store import verify_cli
from stockade.record.chain import Chain, rows
from stockade.record.events import AnnotationEvent
from stockade.record.shards import shard_path, verify_shards
from stockade.record.store import Store, StoreError
from stockade.record.verify import verify
from stockade.record.writer import HEADER, _answer, read_frame
from stockade.record.writers import ShardedRecord


def _events(run: str, count: int) -> list[AnnotationEvent]:
    return [
        AnnotationEvent(f"{run}-{i}", run_id=run, step=i, name="r", score=i) for i in range(count)
    ]


def _gone(pids: list[int], seconds: float = 30) -> bool:
    return wait_until(lambda: not any(alive(p) for p in pids), seconds)


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sharded")
    main = Chain(Store(str(root / "state" / "store.db")))
    sharded = ShardedRecord(main, 2)
    runs = [f"episode{i}" for i in range(6)]
    for run in runs:
        sharded.append(_events(run, 5), run)
    assert {sharded.shard_of(r) for r in runs} == {0, 1}  # both shards hold runs
    sharded.anchor()
    sharded.close()
    main.close()
    return root / "state" / "store.db"


def test_one_verify_over_every_shard(record: Path) -> None:
    store = Store(str(record))
    checks = verify_shards(store)
    assert [c.name for c in checks] == ["s0", "s1"]
    assert all(c.ok and c.anchored > 0 and c.after == 0 for c in checks)
    assert sum(c.verdict.events for c in checks if c.verdict) == 30
    assert verify(store).ok
    store.close()
    ran = verify_cli(record)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "shard s0: anchored at event" in ran.stdout and "shard s1" in ran.stdout


@pytest.mark.parametrize("shard", ["s0", "s1"])
@pytest.mark.parametrize("how", ["rewritten", "cut", "re-signed"])
def test_a_shard_tampered_with_fails_verify(
    record: Path, tmp_path: Path, shard: str, how: str
) -> None:
    copy = tmp_path / "state"
    shutil.copytree(record.parent, copy)
    store = copy / "store.db"
    assert verify_cli(store).returncode == 0  # the control: the untouched copy passes
    path = shard_path(Store(str(store)), shard)
    if how == "rewritten":
        with sqlite3.connect(path) as db:
            db.execute("UPDATE events SET body = replace(body, '\"score\":1', '\"score\":9')")
    elif how == "cut":
        with sqlite3.connect(path) as db:
            db.execute("DELETE FROM events WHERE seq = (SELECT MAX(seq) FROM events)")
        Path(path + ".head").unlink(missing_ok=True)  # a careful cut removes the head too
    else:  # a whole new history under a key of its own
        shutil.rmtree(Path(path).parent)
        chain = Chain(Store(path))
        chain.append_many(_events("forged", 15))
        chain.close()
    ran = verify_cli(store)
    assert ran.returncode == 1, ran.stdout
    assert f"shard {shard}" in ran.stderr


def test_the_writers_are_this_processs_children_one_a_cpu_at_most(tmp_path: Path) -> None:
    main = Chain(Store(str(tmp_path / "state" / "store.db")))
    sharded = ShardedRecord(main, 4, processes=2)
    pids = sharded.pids()
    try:
        assert len(pids) == 2
        for pid in pids:
            status = Path(f"/proc/{pid}/status").read_text()
            assert f"PPid:\t{os.getpid()}\n" in status
        for run in (f"run{i}" for i in range(12)):
            sharded.append(_events(run, 2), run)
        sharded.anchor()
    finally:
        sharded.close()
        main.close()
    assert _gone(pids, 5)  # closed: each finished and exited
    cpus = len(os.sched_getaffinity(0))
    one = ShardedRecord(Chain(Store(str(tmp_path / "other" / "store.db"))), 8)
    assert len(one.pids()) == min(8, cpus)
    one.close()
    checks = verify_shards(Store(str(tmp_path / "state" / "store.db")))
    assert [c.name for c in checks] == ["s0", "s1", "s2", "s3"]
    assert all(c.ok and c.after == 0 for c in checks), checks


def test_a_writer_killed_fails_the_batch_it_held_and_a_new_one_takes_its_shards(
    tmp_path: Path,
) -> None:
    store = tmp_path / "state" / "store.db"
    main = Chain(Store(str(store)))
    sharded = ShardedRecord(main, 2, processes=2)
    try:
        first = sharded.writers[0]
        sharded.wait(sharded.send({0: _events("before", 3)}))  # the control: it stores
        os.kill(first.pid, signal.SIGSTOP)  # the batch waits in its pipe, unanswered
        held = sharded.send({0: _events("lost", 3), 1: _events("kept", 3)})
        os.kill(first.pid, signal.SIGKILL)
        with pytest.raises(StoreError, match=r"shard s0 .*ended.*may be stored or not") as raised:
            sharded.wait(held)
        assert "shards/" in (raised.value.hint or "")
        sharded.wait(sharded.send({0: _events("after", 2), 1: _events("after", 2)}))
        fresh = sharded.writers[0]
        assert (
            fresh.pid != first.pid
            and f"PPid:\t{os.getpid()}\n" in Path(f"/proc/{fresh.pid}/status").read_text()
        )
        sharded.anchor()
    finally:
        sharded.close()
        main.close()
    opened = Store(str(store))
    runs = {}
    for name in ("s0", "s1"):
        shard = Store(shard_path(opened, name))
        runs[name] = {r.run_id for r in rows(shard)}
        shard.close()
    assert runs == {"s0": {"before", "after"}, "s1": {"kept", "after"}}
    assert all(c.ok and c.after == 0 for c in verify_shards(opened)), verify_shards(opened)
    opened.close()
    assert verify_cli(store).returncode == 0


def test_a_writer_lost_for_good_fails_every_batch_and_its_shard_is_still_anchored(
    tmp_path: Path,
) -> None:
    store = tmp_path / "state" / "store.db"
    main = Chain(Store(str(store)))
    sharded = ShardedRecord(main, 2, processes=2)
    try:
        sharded.wait(sharded.send({0: _events("before", 3)}))
        folder = Path(shard_path(main.store, "s0")).parent
        key = (folder / "signing.key").read_bytes()
        (folder / "signing.key").unlink()
        (folder / "signing.key").mkdir()  # no new writer can load the shard's key
        os.kill(sharded.writers[0].pid, signal.SIGKILL)
        for _ in range(2):  # the batch in flight, and the next: no writer took the shard
            with pytest.raises(StoreError, match="shard s0") as raised:
                sharded.wait(sharded.send({0: _events("lost", 1)}))
        assert "no new writer started" in raised.value.message  # and why not
        assert "signing key" in raised.value.message
        sharded.anchor()  # no writer either: the lost shard's head read from its store
    finally:
        sharded.close()
        main.close()
    (folder / "signing.key").rmdir()
    (folder / "signing.key").write_bytes(key)
    (folder / "signing.key").chmod(0o600)
    opened = Store(str(store))
    assert all(c.ok and c.after == 0 for c in verify_shards(opened)), verify_shards(opened)
    opened.close()


KILLED = """
import os, sys, time
from stockade.record.chain import Chain
from stockade.record.store import Store
from stockade.record.writers import ShardedRecord
sharded = ShardedRecord(Chain(Store(sys.argv[1])), 2, processes=2)
if sys.argv[2] == "forked" and os.fork() == 0:  # holds the writers' pipes, never execs
    os.setsid()
    time.sleep(60)
    os._exit(0)
print(*sharded.pids(), flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("how", ["alone", "forked"])
def test_a_driver_killed_ends_its_writers(tmp_path: Path, how: str) -> None:
    """Also when a child the driver forked without exec still holds their pipes."""
    with subprocess.Popen(
        [sys.executable, "-c", KILLED, str(tmp_path / "state" / "store.db"), how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as driver:
        assert driver.stdout is not None
        pids = [int(p) for p in driver.stdout.readline().split()]
        assert len(pids) == 2 and all(alive(p) for p in pids)  # the control: they run
        forked = _children_of(driver.pid) - set(pids)
        assert len(forked) == (how == "forked")
        driver.kill()
    assert _gone(pids, 10), "a writer outlived its driver"
    for pid in forked:
        os.kill(pid, signal.SIGKILL)


def test_a_shard_that_cannot_be_opened_is_a_store_error_and_leaves_no_writer(
    tmp_path: Path,
) -> None:
    main = Chain(Store(str(tmp_path / "state" / "store.db")))
    blocker = Path(shard_path(main.store, "s1")).parent
    blocker.parent.mkdir(parents=True)
    blocker.write_text("not a folder")
    before = _children()
    with pytest.raises(StoreError, match="shard s1"):
        ShardedRecord(main, 2, processes=2)
    assert _gone(sorted(_children() - before), 10)
    main.close()


def test_a_shard_whose_key_is_not_its_records_fails_its_batch(tmp_path: Path) -> None:
    main = Chain(Store(str(tmp_path / "state" / "store.db")))
    sharded = ShardedRecord(main, 1)
    sharded.append(_events("first", 2), "first")
    sharded.close()
    key = Path(shard_path(main.store, "s0")).parent / "signing.key"
    assert key.exists()
    key.unlink()  # the next writer makes a key of its own
    sharded = ShardedRecord(main, 1)
    try:
        with pytest.raises(StoreError, match="not the key its record was signed with") as raised:
            sharded.append(_events("second", 2), "second")
        assert "signing.key" in (raised.value.hint or "")
    finally:
        sharded.close()
        main.close()


def _children() -> set[int]:
    return _children_of(os.getpid())


def _children_of(parent: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            if f"PPid:\t{parent}\n" in status and alive(int(entry.name)):
                found.add(int(entry.name))
    return found


def test_a_request_the_writer_does_not_know_is_answered_with_an_error(tmp_path: Path) -> None:
    chain = Chain(Store(str(tmp_path / "store.db")))
    assert _answer([chain], ("drop", 0, None))[0] == "error"
    assert _answer([chain], ("head", 3, None))[0] == "error"  # a shard it does not own
    assert _answer([chain], ("append", 0, "not events"))[0] == "error"
    assert _answer([chain], ("head", 0, None)) == ("ok", (0, "", chain.public))
    chain.close()


@given(st.binary(max_size=64))
def test_a_cut_or_malformed_frame_ends_the_stream_never_raises(data: bytes) -> None:
    stream = io.BytesIO(data)
    while (body := read_frame(stream)) is not None:
        assert len(body) <= len(data) - HEADER.size


CUT_OFF = """
import sys
from stockade.record.chain import Chain
from stockade.record.events import ActionEvent, PermissionEvent
from stockade.record.store import Store
from stockade.request.verdict import Classification, Decision
chain = Chain(Store(sys.argv[1]))
chain.append_many([
    ActionEvent("cut", ("sleep", "9"), cwd="/", mode="read-only", origin="api",
                profile="default", run_id="episode-cut", step=1),
    PermissionEvent("cut", Classification("reads", ("test",)),
                    decision=Decision("allow", "test", by="test")),
])
"""  # a shard writer's process that recorded an allowed command, then went away


def test_a_shards_commands_cut_off_are_closed_on_the_next_start(tmp_path: Path) -> None:
    path = tmp_path / "state" / "store.db"
    main = Chain(Store(str(path)))
    shard = shard_path(main.store, "s0")
    subprocess.run([sys.executable, "-c", CUT_OFF, shard], check=True, timeout=60)
    before = Store(shard)
    assert [r.kind for r in rows(before)] == ["action", "permission"]  # the control
    before.close()
    sharded = ShardedRecord(main, 1)  # the next start
    sharded.close()
    main.close()
    after = Store(shard)
    closing = [r for r in rows(after) if r.kind == "error"]
    assert [(r.action_id, r.body["code"]) for r in closing] == [("cut", "aborted")]
    assert "ended before its result was recorded" in closing[0].body["message"]
    after.close()
    (check,) = verify_shards(Store(str(path)))
    assert check.ok and check.after == 0, check  # the closing is anchored at once


def test_a_shard_is_named_from_its_opening_so_deleting_it_before_any_event_fails(
    tmp_path: Path,
) -> None:
    """Each shard is anchored at event 0 as the record opens: a pool killed before a shard's
    first anchor of events used to leave a folder whose deletion left no trace."""
    store = tmp_path / "state" / "store.db"
    main = Chain(Store(str(store)))
    sharded = ShardedRecord(main, 2)
    sharded.close()
    main.close()
    opened = Store(str(store))
    anchored = [(r.body["shard"], r.body["seq"]) for r in rows(opened) if r.kind == "anchor"]
    assert anchored == [("s0", 0), ("s1", 0)]
    assert all(check.ok for check in verify_shards(opened)), verify_shards(opened)  # control
    shutil.rmtree(Path(shard_path(opened, "s1")).parent)
    (check,) = [c for c in verify_shards(opened) if c.name == "s1"]
    opened.close()
    assert not check.ok and "is missing" in check.problems[0], check


def test_a_writer_imports_nothing_from_the_drivers_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = tmp_path / "cwd"
    planted.mkdir()
    marker = tmp_path / "imported"
    (planted / "json.py").write_text(
        f"open({str(marker)!r}, 'a').write('x')\nraise SystemExit(3)\n"
    )
    subprocess.run([sys.executable, "-c", "import json"], cwd=planted, check=False)
    assert marker.exists()  # the control: a plain interpreter there takes the planted module
    marker.unlink()
    monkeypatch.chdir(planted)
    main = Chain(Store(str(tmp_path / "state" / "store.db")))
    sharded = ShardedRecord(main, 1)
    sharded.append(_events("r", 2), "r")
    sharded.close()
    main.close()
    assert not marker.exists()


def test_a_command_a_shard_records_as_started_is_the_drivers(tmp_path: Path) -> None:
    """The ``live`` table names the driver, which records the command's end, not the writer:
    a writer lost and replaced, or a second opener, would take its commands for cut off."""
    from stockade.record import live
    from stockade.record.events import ActionEvent, PermissionEvent
    from stockade.request.verdict import Classification, Decision

    main = Chain(Store(str(tmp_path / "state" / "store.db")))
    sharded = ShardedRecord(main, 1)
    allowed = Decision("allow", "test", by="test")
    sharded.append(
        [
            ActionEvent(
                "c1",
                ("true",),
                cwd="/",
                mode="read-only",
                origin="api",
                profile="default",
                run_id="r",
                step=1,
            ),
            PermissionEvent("c1", Classification("reads", ("test",)), decision=allowed),
        ],
        "r",
    )
    writer = sharded.pids()[0]
    sharded.close()
    main.close()
    with sqlite3.connect(shard_path(Store(str(tmp_path / "state" / "store.db")), "s0")) as db:
        (owner,) = db.execute("SELECT owner FROM live WHERE action_id='c1'").fetchone()
    assert owner == live.owner() and f" {writer} " not in owner


def test_answers_are_read_as_they_come_so_no_pipe_fills(tmp_path: Path) -> None:
    """A thousand requests whose answers are long errors, none waited for until the end:
    the answers' pipe (64 KiB) would fill, and the writer and the driver wait on each other."""
    from stockade.record.writer import frame

    main = Chain(Store(str(tmp_path / "state" / "store.db")))
    sharded = ShardedRecord(main, 1)
    writer = sharded.writers[0]
    tickets: list[int] = []

    def flood() -> None:
        tickets.extend(writer.send(frame(("x" * 1500, 0, None))) for _ in range(1000))

    thread = threading.Thread(target=flood, daemon=True)
    thread.start()
    thread.join(60)
    try:
        assert not thread.is_alive(), "the driver and its writer wait on each other"
        for ticket in tickets:
            with pytest.raises(StoreError, match="has no request"):
                writer.wait(ticket)
        with pytest.raises(StoreError, match="answered already"):
            writer.wait(tickets[0])
    finally:
        sharded.close()
        main.close()


def test_a_writer_that_answers_nothing_is_killed_and_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stockade.record import writers

    monkeypatch.setattr(writers, "STALL", 1.0)
    main = Chain(Store(str(tmp_path / "state" / "store.db")))
    sharded = ShardedRecord(main, 1)
    try:
        stopped = sharded.pids()[0]
        os.kill(stopped, signal.SIGSTOP)
        with pytest.raises(StoreError, match="answered nothing for 1 s"):
            sharded.append(_events("held", 2), "held")
        assert _gone([stopped], 10)
        sharded.append(_events("after", 2), "after")  # a new writer took the shard
        assert sharded.pids() != [stopped]
    finally:
        sharded.close()
        main.close()


def test_misuse_is_a_store_error(tmp_path: Path) -> None:
    main = Chain(Store(str(tmp_path / "state" / "store.db")))
    sharded = ShardedRecord(main, 2, processes=2)
    with pytest.raises(StoreError, match="cannot be sent"):  # nothing of the call is sent
        sharded.send({1: _events("kept", 2), 0: [threading.Lock()]})  # type: ignore[list-item]
    tickets = sharded.send({1: _events("once", 1)})
    sharded.wait(tickets)
    with pytest.raises(StoreError, match="answered already"):
        sharded.wait(tickets)
    later = sharded.send({1: _events("late", 1)})
    sharded.close()
    with pytest.raises(StoreError, match="closed"):
        sharded.append(_events("after", 1), "after")
    assert sharded.wait(later) == [1]  # answered before the writer ended: kept
    main.close()
    shard = Store(shard_path(Store(str(tmp_path / "state" / "store.db")), "s1"))
    assert "kept" not in {r.run_id for r in rows(shard)}
    shard.close()


CLOSED = """
import os, sys, time
from stockade.record.chain import Chain
from stockade.record.store import Store
from stockade.record.writers import ShardedRecord
sharded = ShardedRecord(Chain(Store(sys.argv[1])), 2, processes=2)
child = os.fork()
if child == 0:  # holds the writers' pipes (not this test's), never execs
    os.close(1)
    os.close(2)
    time.sleep(30)
    os._exit(0)
start = time.monotonic()
sharded.close()
print(time.monotonic() - start, child)
"""


def test_close_ends_the_writers_while_a_forked_child_holds_their_pipes(tmp_path: Path) -> None:
    ran = subprocess.run(
        [sys.executable, "-c", CLOSED, str(tmp_path / "state" / "store.db")],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    took, child = ran.stdout.split()
    os.kill(int(child), signal.SIGKILL)
    assert float(took) < 10, ran.stdout


def test_a_writer_imports_nothing_from_the_drivers_search_path(tmp_path: Path) -> None:
    """``-P`` is not enough: the driver's ``sys.path`` (its script's folder first, or its
    working folder under ``python -m``) handed on as ``PYTHONPATH`` put it back. Here the
    driver has taken what it needs, then a folder with a planted ``json.py`` stands first
    on its ``sys.path``, as its script's folder does."""
    planted = tmp_path / "scripts"
    planted.mkdir()
    marker = tmp_path / "imported"
    plant = f"import os\nopen({str(marker)!r}, 'a').write(str(os.getpid()))\nraise SystemExit(7)\n"
    (planted / "json.py").write_text(plant)
    driver = (
        "import sys\n"
        "from stockade.record.chain import Chain\nfrom stockade.record.store import Store\n"
        "from stockade.record.writers import ShardedRecord\n"
        f"sys.path.insert(0, {str(planted)!r})\n"
        "record = ShardedRecord(Chain(Store(sys.argv[1])), 1)\nrecord.close()\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", driver, str(tmp_path / "state" / "store.db")],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0 and not marker.exists(), ran.stderr


def test_close_racing_a_replacement_leaves_no_writer(tmp_path: Path) -> None:
    main = Chain(Store(str(tmp_path / "state" / "store.db")))
    sharded = ShardedRecord(main, 1)
    first = sharded.pids()[0]
    os.kill(first, signal.SIGKILL)
    assert _gone([first], 10)
    before = _children()
    started = threading.Event()
    errors: list[BaseException] = []

    def append() -> None:
        started.set()
        for _ in range(50):
            try:
                sharded.append(_events("r", 1), "r")
            except StoreError as error:
                errors.append(error)

    thread = threading.Thread(target=append)
    thread.start()
    started.wait()
    sharded.close()
    thread.join(60)
    assert not thread.is_alive()
    assert _gone(sorted(_children() - before), 10), "a writer started after close() ran on"
    assert all("closed" in str(e) or "ended" in str(e) for e in errors), errors
    main.close()
