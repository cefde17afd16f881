"""Names and arguments that are not UTF-8 (an attack review's finding): Python holds them
as strings with lone surrogates, which no UTF-8 text can carry, so recording a command
with ``$'\\xff'`` in its argv, or the landing of a file named so, failed: the command was
refused (the record fails closed), or a landed step had no result in the record. The
record now writes such a character as its JSON escape: the step runs, lands and is
recorded exactly, and verifies. The control: the JSON text the record wrote before cannot
be encoded."""

from __future__ import annotations

import json
import os

import pytest

from stockade.config.schema import Config, StoreConfig
from stockade.record.chain import rows
from stockade.record.store import Store
from stockade.record.verify import verify

ODD = os.fsdecode(b"a\xffb")


def test_the_old_text_could_not_be_written():
    text = json.dumps({"argv": ["printf", ODD]}, ensure_ascii=False)
    with pytest.raises(UnicodeEncodeError):
        text.encode()


@pytest.mark.sandboxes("bubblewrap", "landlock")
def test_an_argument_that_is_no_utf8_runs_and_is_recorded_exactly(
    box, make_host, sandbox, tmp_path
):
    path = tmp_path / "state" / "store.db"
    host = make_host(allow_all=True, config=Config(sandbox=sandbox, store=StoreConfig(str(path))))
    result = host.run(box.request(["printf", "%s", ODD]))
    assert result.exit_code == 0 and result.stdout.total_bytes == 3
    store = Store(str(path), read_only=True)
    try:
        [action] = [r for r in rows(store) if r.kind == "action"]
        assert action.body["argv"][-1] == ODD  # as given, byte for byte
        assert "result" in [r.kind for r in rows(store)]
        assert verify(store).ok
    finally:
        store.close()


@pytest.mark.sandboxes("bubblewrap")
def test_a_file_named_with_no_utf8_lands_and_is_recorded(box, make_host, sandbox, tmp_path):
    path = tmp_path / "state" / "store.db"
    host = make_host(allow_all=True, config=Config(sandbox=sandbox, store=StoreConfig(str(path))))
    result = host.run(box.py("open(b'bad\\xff', 'w').write('x')"))
    assert result.ok and result.landed == "landed", result.stderr.text
    assert (box.ws / os.fsdecode(b"bad\xff")).read_text() == "x"
    assert result.changes is not None and result.changes.created == (os.fsdecode(b"bad\xff"),)
    store = Store(str(path), read_only=True)
    try:
        kinds = [r.kind for r in rows(store)]
        assert "result" in kinds, kinds
        assert verify(store).ok
    finally:
        store.close()
