"""A command cannot forge a recorded output: the blobs beside the store are out of its reach.

``verify``, ``show``, ``replay`` and the run page catch a changed blob after the fact; this
is the first line: a sandboxed command that knows exactly where an earlier step's output
lies (its name is the sha256 of content the command can guess) cannot change, replace or
remove it.
"""

from __future__ import annotations

import hashlib
import time

import pytest

from stockade.config.schema import Config, StoreConfig
from stockade.confine.promises import Promise
from stockade.conformance.ground import PYTHON
from stockade.record.store import Store
from stockade.record.verify import verify

ATTACK = """\
import os, sys
for target in sys.argv[1:]:
    try:
        with open(target, 'r+b') as handle:
            handle.write(b'FORGED')
        print('WROTE', target)
    except OSError as e:
        print('write refused', e.errno)
    try:
        with open(target + '.new', 'wb') as handle:
            handle.write(b'FORGED')
        os.replace(target + '.new', target)
        print('REPLACED', target)
    except OSError as e:
        print('replace refused', e.errno)
    try:
        os.unlink(target)
        print('REMOVED', target)
    except OSError as e:
        print('remove refused', e.errno)
"""


@pytest.mark.promise(Promise.STORE_HIDDEN)
def test_a_command_cannot_change_replace_or_remove_a_recorded_output(box, make_host, mode):
    state = box.home / ".local" / "state" / "stockade"
    config = Config(sandbox=box.sandbox, store=StoreConfig(str(state / "store.db")))
    host = make_host(allow_all=True, config=config)
    truth = f"the truth {box.canary}\n".encode()
    assert host.run(box.request([PYTHON, "-S", "-c", f"print({truth.decode()[:-1]!r})"])).ok
    digest = hashlib.sha256(truth).hexdigest()
    blob = state / "blobs" / digest[:2] / digest
    assert blob.read_bytes() == truth  # the attack aims where the output really is
    # The control: the same attack on a copy the command may write lands, all three ways.
    decoy = box.ws / digest
    decoy.write_bytes(truth)
    # A file changed just before a layered command starts (within a clock tick: 10 ms) counts
    # as changed by another program while it ran: its removal would be kept aside, not landed.
    time.sleep(0.05)
    out = host.run(box.py(ATTACK, str(decoy))).stdout.text
    assert f"WROTE {decoy}" in out and f"REPLACED {decoy}" in out and f"REMOVED {decoy}" in out
    assert not decoy.exists()
    # The attack itself, in each mode: refused each way, and the record still holds.
    out = host.run(box.py(ATTACK, str(blob), mode=mode)).stdout.text
    assert out.count("refused") == 3, out
    assert f"WROTE {blob}" not in out and f"REPLACED {blob}" not in out, out
    assert f"REMOVED {blob}" not in out, out
    assert blob.read_bytes() == truth
    store = Store(str(state / "store.db"))
    try:
        verdict = verify(store)
    finally:
        store.close()
    assert verdict.ok, verdict.problems
    assert verdict.blobs_held == verdict.blobs >= 3  # the truth, and the attacks' own outputs
