"""``stockade verify`` catches every change to the chain of events: an edit, a re-link
without the key, a borrowed or garbled signature, dropped, renumbered or swapped events, a
cut tail, a truncated or foreign store, and counts problems past its cap; and a chain
re-signed with a replaced key verifies, the limit the docs state.

Each test records real commands into a store of its own (the ``recorded`` fixture), checks
the control, then changes the store as someone without the key could
(:mod:`helpers.store`). The blobs' attacks: ``test_verify_blobs.py``."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from helpers.server import FULL
from helpers.store import _rows, check, cli, sql
from stockade.config.schema import Config, StoreConfig
from stockade.errors import StockadeError
from stockade.record.chain import GENESIS, head_path, key_path, link
from stockade.record.store import Store
from stockade.record.verify import PROBLEMS_LISTED
from stockade.request.spec import ExecRequest

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
