"""``stockade verify`` says what it checked, and catches a changed, missing or misnamed output
blob; ``show``, ``replay`` and the run page refuse to show a forged output.

Each test records real commands into a store of its own (the ``recorded`` fixture), checks
that the untouched store verifies (the control: the attack, not the setup, is what fails),
then changes the store as someone with write access to the state folder but without the
key could (:mod:`helpers.store`). The chain's attacks: ``test_verify_chain.py``; declines:
``test_declines.py``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers.store import FORGED, TRUTH, _rows, blob_of, check, cli, forge, sql
from stockade.record.blobs import BlobError, blob_path, open_blob
from stockade.record.chain import key_path
from stockade.record.store import Store, store_path
from stockade.record.verify import verify

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


# --- the run page ---------------------------------------------------------------------------


@pytest.fixture
def ui(tmp_path: Path):
    from helpers.ui import Ui  # the same server helper as the page's HTTP tests

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


def test_a_blob_grown_in_place_is_refused_before_it_is_read(recorded, env, tmp_path):
    """A blob made a sparse file of 2 GiB (4 KiB of the forger's disk) is refused by its
    size, which its result records, before a byte is read or copied (``show`` spooled all
    of it to the temporary folder, then refused it by its hash). The control: the blob as
    recorded holds, at the size its result says."""
    store, run = recorded
    blob = blob_of(store, run, 1)
    [result] = [r for r in _rows(store) if r["kind"] == "result" and r["step"] == 1]
    stdout = json.loads(result["body"])["result"]["stdout"]
    assert stdout["sha256"] == blob.name and stdout["total_bytes"] == blob.stat().st_size
    os.truncate(blob, 2 << 30)
    verdict = check(store)
    [problem] = verdict.problems
    assert problem.text.endswith(f"was changed: it now is {2 << 30} bytes"), problem.text
    empty = tmp_path / "spool"
    empty.mkdir()
    for command in (["show", run, "1"], ["replay", run]):
        said = cli(*command, env={**env, "TMPDIR": str(empty)})
        assert said.returncode != 0 and f"is {2 << 30} bytes" in said.stdout + said.stderr
        assert not list(empty.iterdir())
