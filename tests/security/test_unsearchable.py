"""A folder the host may not search (an attack review's finding on hosts that are not root).
A command makes a folder ``600``: it can still be listed, but nothing in it looked at, by a
host without root's override. So the host saw a private file in it by name only, took it
for gone, and hid nothing: the next ungranted run gave itself the right back and read it.
The same folder hid its files from the quota, and in a layer made the host fail on its
landing, the step's result unrecorded. Now what the host may not look at is hidden whole
(the deepest folder above it that it can), counts as over a quota, and a layer's folders
get their owner's rights back before they are read (as landing gives them). As root every
case holds by the override; the unprivileged pass (``stockade-ci``) is where they bite. The
control of each read: the same step granted the private files reads the canary."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_breaker import config

from stockade.config.schema import Config, StoreConfig
from stockade.request.spec import Profile
from stockade.run import quota
from stockade.testing import EventLog

ROOT = os.geteuid() == 0


def _read(make_host, box, folder: str, name: str, *, granted: bool = False) -> str:
    host = make_host(config=config(box, 9))
    script = f"chmod 700 {folder}; cat {folder}/{name}"
    request = box.request(["sh", "-c", script], profile="a", preapproved=True, read_private=granted)
    return host.run(request).stdout.text


@pytest.mark.parametrize("where", ["private", "backup"])
def test_a_private_file_in_a_folder_made_600_stays_hidden(make_host, box, where):
    (box.ws / "private").mkdir()
    notes = box.ws / "private" / "notes.txt"
    notes.write_text(box.canary + "\n")
    if where == "backup":  # a hard link the person made before, the same data
        (box.ws / "backup").mkdir()
        os.link(notes, box.ws / "backup" / "notes.txt")
    host = make_host(config=config(box, 9))
    locked = host.run(box.request(["chmod", "600", where], profile="a", preapproved=True))
    assert locked.exit_code == 0, locked.stderr.text
    try:
        assert box.canary not in _read(make_host, box, where, "notes.txt")
        # The control: granted, the same step reads it.
        (box.ws / where).chmod(0o600)
        assert box.canary in _read(make_host, box, where, "notes.txt", granted=True)
    finally:
        (box.ws / where).chmod(0o700)


def test_a_quota_counts_what_lies_in_a_folder_it_may_not_search(box) -> None:
    (box.ws / "big").mkdir()
    (box.ws / "big" / "data").write_bytes(b"\1" * (4 * quota.MIB))
    (box.ws / "big").chmod(0o600)
    try:
        if ROOT:  # root looks in all the same
            assert quota.usage(str(box.ws)) >= 4 * quota.MIB
        else:
            with pytest.raises(quota.Unmeasured, match="measured whole"):
                quota.usage(str(box.ws))
    finally:
        (box.ws / "big").chmod(0o700)


@pytest.mark.sandboxes("bubblewrap")  # (a layer: the command's writes land after it)
@pytest.mark.parametrize("lock", ["chmod 600 big", "chmod 300 .", "chmod 000 ."])
def test_a_layer_whose_folders_lost_their_rights_lands_and_is_recorded(make_host, box, lock):
    agent = Profile(name="bot", workspace=str(box.ws), quota_mb=64)
    store = StoreConfig(str(box.root / "store" / "store.db"))
    log = EventLog()
    host = make_host(
        allow_all=True,
        config=Config(sandbox=box.sandbox, store=store, agents={"bot": agent}),
        plugins=[log],
    )
    script = f"mkdir big && echo x > big/f && {lock}"
    result = host.run(box.request(["sh", "-c", script], profile="bot", preapproved=True))
    try:
        assert result.exit_code == 0 and result.landed == "landed", result.stderr.text
        assert [e.kind for e in log.events][-1] == "result"  # recorded
        assert (box.ws / "big" / "f").read_text() == "x\n"  # landed, rights given back
    finally:
        os.chmod(box.ws, 0o700)
