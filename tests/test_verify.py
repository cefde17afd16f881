"""``stockade verify`` checks what it says it checks, by attacking a real store each way.

Each test records real commands into a store of its own, checks that the untouched store
verifies (the control: the attack, not the setup, is what fails), then changes the store as
someone with write access to the state folder but without the key could, and checks that
``verify`` names exactly what changed, and that ``show``, ``replay`` and the run page refuse
to show a forged output. (Declines: ``test_declines.py``.)
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stockade.config.schema import Config, StoreConfig
from stockade.errors import StockadeError
from stockade.host import Host
from stockade.record.blobs import BlobError, blob_path, open_blob
from stockade.record.chain import GENESIS, head_path, key_path, link, rows
from stockade.record.store import Store, store_path
from stockade.record.verify import PROBLEMS_LISTED, Verdict, verify
from stockade.request.spec import ExecRequest
from stockade.testing import CLI

FULL = "danger-full-access"
STOCKADE = [*CLI]  # the native client when the session runs through the server
TRUTH = "the truth\n"
FORGED = "a forged line\n"


# --- a store of the test's own ------------------------------------------------------------


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """The state folder the CLI and the hosts of a test share."""
    return tmp_path / "state"


@pytest.fixture
def env(state: Path) -> dict[str, str]:
    found = {
        **os.environ,
        "XDG_STATE_HOME": str(state),
        "STOCKADE_DISABLE_PLUGINS": "bubblewrap,landlock",
    }
    found.pop("STOCKADE_CONFIG", None)
    return found


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*STOCKADE, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def recorded(make_host: Callable[..., Host], state: Path, tmp_path: Path) -> tuple[Path, str]:
    """Three steps of one run (9 events, 4 blobs) in the store the CLI of ``env`` reads: the
    store, the run."""
    store = state / "stockade" / "store.db"
    host = make_host(config=Config(store=StoreConfig(str(store))), allow_all=True)
    # These tests pin the record's shape (3 events a step): the breaker's taint events,
    # which follow a step that printed, are left out here (tests/security/test_breaker.py).
    host.breaker.finish = lambda _spec, carried, record: record(carried)  # type: ignore[method-assign]
    for argv in (
        ["printf", TRUTH],
        ["sh", "-c", "echo out; echo err >&2"],
        ["printf", "third\\n"],
    ):
        assert host.run(ExecRequest(argv, str(tmp_path), mode=FULL)).ok
    host.close()
    return store, host.run_id


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


# --- what verify says it checked ----------------------------------------------------------


def test_an_untouched_store_verifies_and_says_exactly_what_was_checked(recorded, env):
    store, _run = recorded
    verdict = check(store)
    assert verdict.ok, verdict.problems
    assert (verdict.events, verdict.links, verdict.signatures, verdict.head_seq) == (9, 9, 9, 9)
    assert (verdict.blobs, verdict.blobs_held, verdict.key_file) == (4, 4, True)
    said = cli("verify", env=env)
    assert said.returncode == 0
    assert said.stdout.startswith("ok: 9 events; 9 of 9 links hold")
    assert "9 of 9 event signatures hold (Ed25519, the pinned key, which is the signing.key" in (
        said.stdout
    )
    assert "the signed head names event 9" in said.stdout
    assert "4 of 4 output blobs (every run's) hold, re-hashed whole" in said.stdout
    data = json.loads(cli("verify", "--json", env=env).stdout)
    assert data["ok"] and data["problems"] == [] and data["head"]["seq"] == 9
    assert data["head"]["hash"] == _rows(store)[-1]["hash"]


def test_without_the_key_file_verify_says_it_used_only_the_pinned_key(recorded):
    store, _run = recorded
    os.rename(key_path(Store(str(store))), store.parent / "elsewhere.key")
    verdict = check(store)
    assert verdict.ok and not verdict.key_file
    assert "no signing.key beside the store to compare it with" in verdict.checked()


# --- blobs --------------------------------------------------------------------------------


def test_a_changed_blob_fails_verify_naming_the_blob_the_step_and_the_new_digest(recorded):
    store, run = recorded
    blob = blob_of(store, run, 1)
    assert blob.read_text() == TRUTH and check(store).ok  # control
    forge(blob)
    verdict = check(store)
    assert not verdict.ok
    [problem] = verdict.problems
    assert problem.blob == blob.name and problem.seq is None
    forged_digest = __import__("hashlib").sha256(FORGED.encode()).hexdigest()
    assert problem.text == (
        f"the blob of the stdout of step 1 of run {run} (event 3) was changed: it now hashes"
        f" to {forged_digest}"
    )
    # Only the blob: every link, signature and the other blobs still hold, and say so.
    assert (verdict.links, verdict.signatures, verdict.blobs, verdict.blobs_held) == (9, 9, 4, 3)


def test_a_missing_blob_is_named(recorded):
    store, run = recorded
    blob = blob_of(store, run, 2, "stderr")
    blob.unlink()
    [problem] = check(store).problems
    assert problem.text.startswith(f"the blob of the stderr of step 2 of run {run} (event 6)")
    assert "is missing (No such file or directory)" in problem.text


def test_a_body_pointing_at_a_path_not_a_digest_is_caught_and_never_opened(recorded):
    store, _run = recorded
    row = _rows(store)[2]
    body = json.loads(row["body"])
    body["result"]["stdout"]["blob"] = "../../signing.key"
    sql(store, "UPDATE events SET body=? WHERE seq=3", json.dumps(body))
    verdict = check(store)
    texts = [p.text for p in verdict.problems]
    assert texts[0].startswith("event 3 was changed after it was recorded")
    assert any("which is not a blob name" in text for text in texts)
    with pytest.raises(BlobError, match="not a sha256 digest"):
        blob_path(Store(str(store)), "../../signing.key")


def test_show_refuses_a_changed_blob_and_prints_none_of_it(recorded, env):
    store, run = recorded
    shown = cli("show", run, "1", env=env)
    assert (shown.returncode, shown.stdout) == (0, TRUTH)  # control
    forge(blob_of(store, run, 1))
    shown = cli("show", run, "1", env=env)
    assert shown.returncode != 0
    assert FORGED.strip() not in shown.stdout + shown.stderr
    assert shown.stdout == ""
    assert f"error[blob]: the recorded stdout of step 1 of run {run} was changed after it" in (
        shown.stderr
    )
    assert "hint: run `stockade verify`" in shown.stderr


def test_show_prints_neither_stream_when_one_was_changed(recorded, env):
    store, run = recorded
    forge(blob_of(store, run, 2, "stderr"), "forged err\n")
    shown = cli("show", run, "2", env=env)
    assert shown.returncode != 0 and shown.stdout == ""  # stdout holds, yet is not half-shown
    assert "forged err" not in shown.stderr and "stderr of step 2" in shown.stderr


def test_show_says_a_missing_blob_is_missing(recorded, env):
    store, run = recorded
    blob_of(store, run, 3).unlink()
    shown = cli("show", run, "3", env=env)
    assert shown.returncode != 0
    assert f"the recorded stdout of step 3 of run {run} is missing" in shown.stderr
    assert "stockade verify" in shown.stderr


def test_replay_marks_the_changed_output_refused_and_fails(recorded, env):
    store, run = recorded
    assert cli("replay", run, env=env).returncode == 0  # control
    forge(blob_of(store, run, 1))
    replayed = cli("replay", run, env=env)
    assert replayed.returncode != 0
    assert FORGED.strip() not in replayed.stdout + replayed.stderr
    assert "stdout REFUSED: its blob was changed (`stockade verify`)" in replayed.stdout
    assert "error[blob]: the recorded stdout of step 1 (event 3) was changed" in replayed.stderr
    assert "hint: run `stockade verify`" in replayed.stderr
    entries = json.loads(cli("replay", run, "--json", env=env).stdout)
    [refused] = [e for e in entries if e.get("refused")]
    assert refused["seq"] == 3 and refused["refused"][0]["code"] == "blob"


def test_a_blob_too_big_for_memory_is_checked_whole_then_read_from_a_private_copy(
    recorded, monkeypatch
):
    import stockade.record.blobs

    monkeypatch.setattr(stockade.record.blobs, "SPOOL_BYTES", 4)  # every blob takes the spool path
    store_path, run = recorded
    store = Store(str(store_path))
    blob = blob_of(store_path, run, 1)
    with open_blob(store, blob.name) as handle:
        forge(blob)  # changed after the check: the copy is what was checked
        assert handle.read().decode() == TRUTH
    with pytest.raises(BlobError, match="was changed after it was recorded"):
        open_blob(store, blob.name)
    store.close()


def test_what_a_long_lived_reader_remembers_cannot_hide_a_later_change(recorded):
    """The run page keeps what it checked (:class:`Checked`); attack that memory."""
    from stockade.record.verify import Checked

    store_path, run = recorded
    memo = Checked()
    store = Store(str(store_path))
    try:
        assert verify(store, checked=memo).ok  # control, and the memory is filled
        assert verify(store, checked=memo).signatures == 9
        blob = blob_of(store_path, run, 1)
        before = blob.stat()
        forge(blob, TRUTH.upper())  # same size, in place...
        os.utime(blob, ns=(before.st_atime_ns, before.st_mtime_ns))  # ...its mtime put back
        assert [p.blob for p in verify(store, checked=memo).problems] == [blob.name]
        blob.write_text(TRUTH)
        assert verify(store, checked=memo).ok
        sql(store_path, "UPDATE events SET sig=? WHERE seq=4", b"\1" * 64)
        verdict = verify(store, checked=memo)
        assert [p.seq for p in verdict.problems] == [4] and verdict.signatures == 8
    finally:
        store.close()


# --- the chain ----------------------------------------------------------------------------


def test_an_event_edited_in_the_middle_is_named_and_only_it(recorded):
    store, _run = recorded
    body = _rows(store)[4]["body"]
    sql(store, "UPDATE events SET body=? WHERE seq=5", body.replace('"sh"', '"rm"'))
    verdict = check(store)
    assert [p.seq for p in verdict.problems] == [5]
    assert verdict.problem.startswith("event 5 was changed after it was recorded: its content")
    assert (verdict.links, verdict.signatures) == (8, 9)


def test_a_column_edited_against_its_body_is_named_with_both_values(recorded):
    store, _run = recorded
    sql(store, "UPDATE events SET kind='error' WHERE seq=6")
    [problem] = check(store).problems
    assert problem.text == (
        "event 6 was changed after it was recorded: its kind column says 'error', its body"
        " says 'result'"
    )


def test_an_edited_event_re_linked_without_the_key_fails_at_every_signature_after_it(recorded):
    store, _run = recorded
    found = _rows(store)
    prev = found[3]["hash"]
    db = sqlite3.connect(store)
    with db:
        for row in found[4:]:
            body = row["body"].replace('"sh"', '"rm"') if row["seq"] == 5 else row["body"]
            digest = link(prev, row["seq"], body, row["run_id"], row["step"])
            db.execute(
                "UPDATE events SET body=?, prev=?, hash=? WHERE seq=?",
                (body, prev, digest, row["seq"]),
            )
            prev = digest
    db.close()
    verdict = check(store)
    assert verdict.links == 9  # the links were rebuilt consistently...
    assert verdict.signatures == 4  # ...but nobody could sign them
    assert [p.seq for p in verdict.problems] == [5, 6, 7, 8, 9, 9]


def test_another_events_signature_copied_onto_an_edit_is_caught(recorded):
    store, _run = recorded
    found = _rows(store)
    body = found[2]["body"].replace("exit_code", "exit_kode")
    digest = link(found[1]["hash"], 3, body, found[2]["run_id"], found[2]["step"])
    sql(store, "UPDATE events SET body=?, hash=?, sig=? WHERE seq=3", body, digest, found[0]["sig"])
    texts = [p.text for p in check(store).problems]
    assert texts[0].startswith("event 3 is not signed with the store's key")
    assert texts[1].startswith("event 4 does not follow event 3")


def test_a_garbled_signature_alone_is_caught_though_every_link_holds(recorded):
    # Only the last signature was checked before: a middle one could be anything.
    store, _run = recorded
    sql(store, "UPDATE events SET sig=? WHERE seq=4", b"\0" * 64)
    verdict = check(store)
    assert (verdict.links, verdict.signatures) == (9, 8)
    [problem] = verdict.problems
    assert (problem.seq, problem.text) == (
        4,
        "event 4 is not signed with the store's key (its signature does not match its recorded"
        " hash)",
    )


def test_a_chain_re_signed_with_another_key_that_replaced_the_key_file_verifies(recorded):
    """The documented limit: whoever holds (or replaces) the signing key writes history."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    store, _run = recorded
    forger = Ed25519PrivateKey.generate()
    prev = GENESIS
    db = sqlite3.connect(store)
    with db:
        for row in _rows(store):
            body = row["body"].replace("printf", "PRINTF")
            digest = link(prev, row["seq"], body, row["run_id"], row["step"])
            db.execute(
                "UPDATE events SET body=?, prev=?, hash=?, sig=? WHERE seq=?",
                (body, prev, digest, forger.sign(bytes.fromhex(digest)), row["seq"]),
            )
            prev = digest
        public = forger.public_key().public_bytes_raw().hex()
        db.execute("UPDATE meta SET value=? WHERE key='pubkey'", (public,))
    db.close()
    assert not check(store).ok  # the owner's key file still tells
    keyfile = key_path(Store(str(store)))
    Path(keyfile).write_bytes(forger.private_bytes_raw())
    signature = forger.sign(bytes.fromhex(prev)).hex()
    Path(head_path(Store(str(store)))).write_text(f"{9:020d} {prev} {signature}\n")
    assert check(store).ok  # the limit docs/record.md states


def test_a_dropped_event_is_named_and_so_is_a_dropped_run_of_them(recorded):
    store, _run = recorded
    sql(store, "DELETE FROM events WHERE seq=5")
    assert check(store).problem == "event 5 is missing: the record goes from event 4 to event 6"
    sql(store, "DELETE FROM events WHERE seq IN (6, 7)")
    assert (
        check(store).problem == "events 5..7 are missing: the record goes from event 4 to event 8"
    )


def test_an_event_renumbered_before_the_first_is_named(recorded):
    store, _run = recorded
    sql(store, "UPDATE events SET seq=0 WHERE seq=1")
    texts = [p.text for p in check(store).problems]
    assert texts[0] == "event 0 is out of place: the record's events start at 1"
    assert not check(store).ok


def test_two_swapped_events_are_both_named(recorded):
    store, _run = recorded
    db = sqlite3.connect(store)
    with db:
        db.execute("UPDATE events SET seq=-4 WHERE seq=4")
        db.execute("UPDATE events SET seq=4 WHERE seq=5")
        db.execute("UPDATE events SET seq=5 WHERE seq=-4")
    db.close()
    verdict = check(store)
    assert [p.seq for p in verdict.problems] == [4, 4, 5, 5, 6]  # and 6 no longer follows
    assert verdict.problem.startswith("event 4 does not follow event 3")
    assert verdict.links == 6


def test_a_cut_tail_is_caught_and_a_cut_with_a_rewritten_head_shows_in_the_head(recorded):
    store, _run = recorded
    noted = check(store).head_hash  # what a person kept elsewhere
    sql(store, "DELETE FROM events WHERE seq >= 7")
    assert check(store).problem == "the tail was cut: events 7..9 are gone"
    # The limit: a head rebuilt from the last remaining event's own columns holds...
    last = _rows(store)[-1]
    Path(head_path(Store(str(store)))).write_text(
        f"{last['seq']:020d} {last['hash']} {bytes(last['sig']).hex()}\n"
    )
    verdict = check(store)
    assert verdict.ok
    assert (verdict.head_seq, verdict.head_hash != noted) == (6, True)  # ...the noted one tells


def test_a_truncated_file_is_a_structured_error(recorded, env):
    store, _run = recorded
    size = store.stat().st_size
    with open(store, "r+b") as handle:
        handle.truncate(size // 3)
    for name in ("store.db-wal", "store.db-shm"):
        (store.parent / name).unlink(missing_ok=True)
    said = cli("verify", "--json", env=env)
    assert said.returncode != 0
    error = json.loads(said.stdout)["error"]
    assert error["code"] == "store" and error["hint"]


def test_a_store_from_another_format_or_program_is_named_as_such(recorded, env, tmp_path):
    store, _run = recorded
    sql(store, "UPDATE meta SET value='7' WHERE key='chain'")
    assert check(store).problem == (
        "the record's chain format is 7, and this Stockade checks format 1"
    )
    sql(store, "UPDATE meta SET value='99' WHERE key='schema'")
    said = cli("verify", env=env)
    assert said.returncode != 0 and "newer than this Stockade knows" in said.stderr
    other = tmp_path / "other" / "store.db"
    other.parent.mkdir()
    other.write_bytes(b"not sqlite at all\n" * 100)
    with pytest.raises(StockadeError, match="cannot open the store"):
        Store(str(other))


def test_problems_past_the_cap_are_counted(make_host, tmp_path):
    path = tmp_path / "big" / "store.db"
    host = make_host(config=Config(store=StoreConfig(str(path))), allow_all=True)
    for _ in range(PROBLEMS_LISTED // 3 + 2):
        host.run(ExecRequest(["true"], str(tmp_path), mode=FULL))
    host.close()
    sql(path, "UPDATE events SET sig=?", b"\0" * 64)
    verdict = check(path)
    assert len(verdict.problems) == PROBLEMS_LISTED
    assert verdict.more == verdict.events - PROBLEMS_LISTED
    assert verdict.to_dict()["more_problems"] == verdict.more


# --- the run page ---------------------------------------------------------------------------


@pytest.fixture
def ui(tmp_path: Path):
    from test_ui import Ui  # the same server helper as the page's HTTP tests

    server = Ui(tmp_path)
    try:
        yield server
    finally:
        server.stop()


def test_the_run_page_refuses_a_large_changed_output_in_its_preview(ui):
    ui.run(["seq", "1", "300000"])  # about 2 MB: past the preview's read-whole size
    run = ui.agent.run_id
    [result] = ui.results(run, 1)
    store = Store(store_path(ui.agent.config))
    blob = Path(blob_path(store, result["stdout"]["blob"]))  # type: ignore[index]
    store.close()
    assert blob.stat().st_size > (1 << 20)
    page = ui.page(f"/runs/{run}")
    assert "300000" in page  # control: the tail is shown
    data = blob.read_bytes()
    blob.write_bytes(data[:-7] + b"FORGED\n")  # same size: only the tail changed
    page = ui.page(f"/runs/{run}")
    assert "FORGED" not in page
    assert "its content was changed after it was recorded" in page
    assert "run `stockade verify`" in page
    assert "the record does not verify" in page
    status, _, body = ui.get(f"/runs/{run}/steps/1/stdout")
    assert status == 500 and "FORGED" not in body and "stockade verify" in body
