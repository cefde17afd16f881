"""The record: every event in a signed hash chain that `stockade verify` checks by attacking it."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from stockade.config.schema import Config, StoreConfig
from stockade.errors import RecorderFailed
from stockade.record.blobs import BlobError, blob_path, get_blob
from stockade.record.chain import head_path, key_path, rows
from stockade.record.store import Store
from stockade.record.verify import verify
from stockade.request.spec import ExecRequest
from stockade.testing import CLI

FULL = "danger-full-access"
STOCKADE = [*CLI]  # the native client when the session runs through the server


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "store.db"


@pytest.fixture
def recorded(make_host, store_path: Path, tmp_path: Path) -> Path:
    """A store with three steps recorded: a run, a denial of nothing, and output; the
    first printed, so a ``taint`` event follows its result (the breaker's fact: once a run)."""
    host = make_host(config=Config(store=StoreConfig(str(store_path))), allow_all=True)
    for argv in (["echo", "one"], ["ls", str(tmp_path)], ["printf", "two\\nthree"]):
        assert host.run(ExecRequest(argv, str(tmp_path), mode=FULL)).ok
    host.close()
    return store_path


def check(path: Path):
    store = Store(str(path))
    try:
        return verify(store)
    finally:
        store.close()


def edit(path: Path, sql: str, *args: object) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute(sql, args)
    db.close()


def test_an_untouched_store_verifies(recorded):
    verdict = check(recorded)
    assert (verdict.ok, verdict.events, verdict.problem) == (True, 10, "")
    store = Store(str(recorded))
    kinds = [(r.step, r.kind) for r in rows(store)]
    step = ("action", "permission", "result")
    assert kinds == [(1, k) for k in (*step, "taint")] + [(s, k) for s in (2, 3) for k in step]
    store.close()


def test_an_edited_event_is_named(recorded):
    db = sqlite3.connect(recorded)
    body = db.execute("SELECT body FROM events WHERE seq=5").fetchone()[0]
    db.close()
    edit(recorded, "UPDATE events SET body=? WHERE seq=5", body.replace("ls", "rm"))
    verdict = check(recorded)
    assert (verdict.ok, verdict.bad_seq) == (False, 5)
    assert verdict.problem.startswith("event 5 was changed after it was recorded: its content")


def test_a_deleted_event_is_named(recorded):
    edit(recorded, "DELETE FROM events WHERE seq=5")
    verdict = check(recorded)
    assert (verdict.ok, verdict.bad_seq) == (False, 5)
    assert verdict.problem == "event 5 is missing: the record goes from event 4 to event 6"


def test_reordered_events_are_named(recorded):
    db = sqlite3.connect(recorded)
    first, second = db.execute("SELECT body FROM events WHERE seq IN (2, 3) ORDER BY seq")
    with db:
        db.execute("UPDATE events SET body=? WHERE seq=2", (second[0],))
        db.execute("UPDATE events SET body=? WHERE seq=3", (first[0],))
    db.close()
    verdict = check(recorded)
    assert (verdict.ok, verdict.bad_seq) == (False, 2)


def test_a_chain_rebuilt_and_re_signed_with_another_key_is_caught(recorded):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from stockade.record.chain import GENESIS, link

    forger = Ed25519PrivateKey.generate()
    db = sqlite3.connect(recorded)
    found = db.execute("SELECT seq, body, run_id, step FROM events ORDER BY seq").fetchall()
    prev = GENESIS
    with db:
        for seq, original, run_id, step in found:
            body = original.replace("one", "won") if seq == 1 else original
            digest = link(prev, seq, body, run_id, step)
            signature = forger.sign(bytes.fromhex(digest))
            db.execute(
                "UPDATE events SET body=?, prev=?, hash=?, sig=? WHERE seq=?",
                (body, prev, digest, signature, seq),
            )
            prev = digest
    db.close()
    verdict = check(recorded)
    assert (verdict.ok, verdict.bad_seq) == (False, 1)
    assert verdict.problem.startswith("event 1 is not signed with the store's key")
    assert (verdict.links, verdict.signatures, verdict.more) == (10, 0, 0)  # every one named
    assert [p.seq for p in verdict.problems] == [*range(1, 11), 10]  # and the head's event
    assert verdict.problems[-1].text == "event 10 is not the one the head names"
    # Pinning the forger's key too is caught against the owner's key file.
    public = forger.public_key().public_bytes_raw().hex()
    edit(recorded, "UPDATE meta SET value=? WHERE key='pubkey'", public)
    assert check(recorded).problem == "the pinned key is not the store's signing key"


def test_a_truncated_tail_is_caught(recorded):
    edit(recorded, "DELETE FROM events WHERE seq >= 8")
    verdict = check(recorded)
    assert (verdict.ok, verdict.bad_seq) == (False, 8)
    assert verdict.problem == "the tail was cut: events 8..10 are gone"
    os.unlink(head_path(Store(str(recorded))))
    assert check(recorded).problem == "the head file is missing or unreadable"


def test_the_key_and_the_store_are_owner_only(recorded):
    store = Store(str(recorded))
    for path in (key_path(store), str(recorded), head_path(store), os.path.dirname(recorded)):
        assert os.stat(path).st_mode & 0o077 == 0, path
    os.chmod(key_path(store), 0o644)
    from stockade.record.chain import load_key
    from stockade.record.store import StoreError

    with pytest.raises(StoreError, match="readable by others"):
        load_key(key_path(store), create=False)
    store.close()


def test_output_is_kept_whole_by_content_address(make_host, store_path, tmp_path):
    config = Config(store=StoreConfig(str(store_path)))
    host = make_host(config=config, allow_all=True)
    big = host.run(ExecRequest(["seq", "1", "300000"], str(tmp_path), mode=FULL))
    assert big.stdout.truncated
    store = Store(str(store_path))
    [result] = [r for r in rows(store) if r.kind == "result"]
    stream = result.body["result"]["stdout"]
    assert "text" not in stream
    whole = get_blob(store, stream["blob"])
    assert whole == "".join(f"{n}\n" for n in range(1, 300001)).encode()
    assert stream["sha256"] == big.stdout.sha256
    store.close()


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*STOCKADE, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_commands_read_the_record(tmp_path):
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "STOCKADE_DISABLE_PLUGINS": "bubblewrap,landlock",
    }
    env.pop("STOCKADE_CONFIG", None)
    ran = cli("run", "--mode", FULL, "--", "printf", "hello\\n", env=env)
    assert ran.returncode == 0
    [step] = json.loads(cli("log", "--json", env=env).stdout)
    assert (step["argv"], step["state"], step["exit_code"], step["kind"]) == (
        ["printf", "hello\\n"],
        "ran",
        0,
        "reads",
    )
    shown = cli("show", step["run_id"], "1", env=env)
    assert shown.stdout == "hello\n"
    timeline = json.loads(cli("replay", step["run_id"], "--json", env=env).stdout)
    kinds = [e["kind"] for e in timeline]
    assert kinds == ["action", "permission", "result", "taint"]  # taint: its output came back
    hidden = json.loads(cli("replay", step["run_id"], "--redact", "--json", env=env).stdout)
    assert "printf" not in json.dumps(hidden) and "hello" not in json.dumps(hidden)
    assert cli("verify", env=env).returncode == 0
    db = sqlite3.connect(tmp_path / "state" / "stockade" / "store.db")
    with db:
        db.execute("UPDATE events SET time=time+1 WHERE seq=2")
    db.close()
    broken = cli("verify", "--json", env=env)
    assert broken.returncode == 1
    found = json.loads(broken.stdout)
    assert (found["ok"], found["events"], found["bad_seq"]) == (False, 4, 2)
    assert (found["links"], found["signatures"], found["blobs"]) == (3, 4, 1)
    assert found["problem"].startswith(
        "event 2 was changed after it was recorded: its time column says"
    )
    assert [p["seq"] for p in found["problems"]] == [2]


def test_a_host_killed_mid_run_leaves_a_store_that_verifies(tmp_path):
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "STOCKADE_DISABLE_PLUGINS": "bubblewrap,landlock",
    }
    env.pop("STOCKADE_CONFIG", None)
    marker = tmp_path / "started"
    # Without a terminal or --yes, a script that removes a file (destroys) is held: a step of
    # its own in the log.
    held = cli("run", "--mode", FULL, "--", "sh", "-c", f"touch {marker}; rm -f x", env=env)
    assert held.returncode == 126 and not marker.exists()
    host = subprocess.Popen(
        [*STOCKADE, "run", "--yes", "--mode", FULL, "--", "sh", "-c", f"touch {marker}; sleep 60"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.02)
    os.killpg(host.pid, signal.SIGKILL)
    host.wait(timeout=30)
    # In-process, the host died with the client: the step is unfinished. Through the warm
    # server, the server saw its client go and killed the command: the step ran, aborted.
    served = os.environ.get("STOCKADE_NO_SERVER") != "1"
    deadline = time.monotonic() + 30
    while True:
        steps = json.loads(cli("log", "--json", env=env).stdout)
        if not served or steps[-1]["state"] == "ran" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    verified = cli("verify", "--json", env=env)
    assert verified.returncode == 0, verified.stdout
    assert [s["state"] for s in steps] == ["held", "ran" if served else "unfinished"]
    assert steps[1]["argv"][0] == "sh"


def test_a_store_that_fails_refuses_commands_until_it_works_again(make_host, tmp_path):
    state = tmp_path / "state"
    state.write_text("not a folder")  # the store cannot be made: as root or not
    host = make_host(config=Config(store=StoreConfig(str(state / "store.db"))), allow_all=True)
    canary = tmp_path / "canary"
    for _ in range(2):  # every command, not just the first
        with pytest.raises(RecorderFailed, match="the command was not run") as caught:
            host.run(ExecRequest(["touch", str(canary)], str(tmp_path), mode=FULL))
        assert "cannot open the store" in caught.value.message
        assert not canary.exists()
    state.unlink()  # the storage is fixed: the same host records and runs again
    assert host.run(ExecRequest(["touch", str(canary)], str(tmp_path), mode=FULL)).ok
    assert canary.exists()
    assert check(state / "store.db").ok


def test_fail_open_runs_unrecorded_with_a_warning(make_host, tmp_path, capfd):
    state = tmp_path / "state"
    state.write_text("not a folder")
    config = Config(store=StoreConfig(str(state / "store.db"), fail_closed=False))
    host = make_host(config=config, allow_all=True)
    assert host.run(ExecRequest(["true"], str(tmp_path), mode=FULL)).ok
    assert "stockade: warning: 2 events (action, permission) not recorded" in capfd.readouterr().err


def test_redaction_rules_keep_matches_out_of_the_record(make_host, tmp_path):
    path = tmp_path / "state" / "store.db"
    rules = StoreConfig(str(path), redact=(r"ghp_[A-Za-z0-9]{8,}",))
    host = make_host(config=Config(store=rules), allow_all=True)
    token = "ghp_" + "A1b2C3d4E5f6"
    lines = "".join(f"line {n} {token}\n" for n in range(40000))  # past the kept limit: spilled
    script = tmp_path / "out.txt"
    script.write_text(lines)
    small = host.run(ExecRequest(["echo", f"--token={token}"], str(tmp_path), mode=FULL))
    assert small.stdout.text == f"--token={token}\n"  # the caller sees its own output
    big = host.run(ExecRequest(["cat", str(script)], str(tmp_path), mode=FULL))
    assert big.stdout.truncated
    store = Store(str(path))
    everything = json.dumps([r.body for r in rows(store)])
    assert token not in everything and "--token=[redacted]" in everything
    blobs = [
        get_blob(store, r.body["result"]["stdout"]["blob"])
        for r in rows(store)
        if r.kind == "result"
    ]
    assert blobs[0] == b"--token=[redacted]\n"
    assert token.encode() not in blobs[1] and blobs[1].count(b"[redacted]") == 40000
    store.close()
    assert check(path).ok


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [("(", "is not a regular expression"), ("x*", "matches the empty string")],
)
def test_a_bad_redaction_rule_is_a_config_error(pattern, problem):
    from stockade.config.load import parse_config
    from stockade.errors import ConfigError

    with pytest.raises(ConfigError, match=problem):
        parse_config(f"[store]\nredact = [{json.dumps(pattern)}]\n")


def test_a_version_1_store_is_migrated_and_keeps_its_held_steps(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('schema', '1');
        CREATE TABLE held (run_id TEXT NOT NULL, step INTEGER NOT NULL, state TEXT NOT NULL,
            created REAL NOT NULL, spec TEXT NOT NULL, stdin BLOB NOT NULL,
            classification TEXT NOT NULL, decision TEXT NOT NULL, answered_by TEXT,
            answered_at REAL, outcome TEXT, PRIMARY KEY (run_id, step));
        INSERT INTO held VALUES ('r1', 1, 'declined', 0, '{}', x'', '{}', '{}', 'bob', 0, NULL);
        """
    )
    db.close()
    store = Store(str(path))
    with store.locked():
        schema = store.connection.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        held = store.connection.execute("SELECT run_id, state FROM held").fetchall()
        tables = {
            row[0]
            for row in store.connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
    assert schema == ("2",)
    assert held == [("r1", "declined")]
    assert "events" in tables
    assert verify(store).ok  # an empty record verifies
    store.close()


def test_a_chain_of_another_format_is_reported_as_such(recorded):
    edit(recorded, "UPDATE meta SET value='0' WHERE key='chain'")
    verdict = check(recorded)
    assert not verdict.ok
    assert verdict.problem == "the record's chain format is 0, and this Stockade checks format 1"


def test_a_fifo_or_a_link_in_a_blobs_place_is_refused_without_reading_it(recorded):
    """A FIFO would hang a reader, a device never end; a link may point anywhere."""
    store = Store(str(recorded))
    try:
        [result] = [r for r in rows(store) if r.kind == "result" and r.step == 1]
        digest = result.body["result"]["stdout"]["blob"]
        blob = Path(blob_path(store, digest))
        truth = blob.read_bytes()
        assert check(recorded).ok  # control
        twin = blob.parent / "twin"
        twin.write_bytes(truth)  # the same content, even: a link is still refused
        blob.unlink()
        blob.symlink_to(twin)
        [problem] = check(recorded).problems
        assert "is missing (Too many levels of symbolic links)" in problem.text
        with pytest.raises(BlobError, match="symbolic links"):
            get_blob(store, digest)
        blob.unlink()
        os.mkfifo(blob)
        [problem] = check(recorded).problems
        assert "is missing (not a regular file)" in problem.text
        with pytest.raises(BlobError, match="not a regular file"):
            get_blob(store, digest)
    finally:
        store.close()
