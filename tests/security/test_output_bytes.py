"""Output that is not UTF-8 is kept as the bytes it was. Its text shows U+FFFD where they
were (for terminals and JSON), and the stream's exact bytes go to a spill file of their own,
from which the record keeps them: the blob is the stream (its name is the stream's sha256,
its size the stream's), and ``stockade show`` prints them back. (``stockade run`` prints
the text, in-process as through the warm server, whose frames carry text.) Before, the
record kept the replaced text under another name, so a step's output could never be
replayed or proved against the digest its result records. The control: UTF-8 output keeps
no spill file, and its blob is its text."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from stockade.config.schema import Config, StoreConfig
from stockade.record.blobs import get_blob
from stockade.record.chain import rows
from stockade.record.store import Store
from stockade.record.verify import verify
from stockade.request.spec import ExecRequest
from stockade.testing import CLI

BYTES = b"caf\xe9 \xff\xfe end\n"  # Latin-1, and bytes no UTF-8 has
PRINTF = ("/usr/bin/printf", "caf\\351 \\377\\376 end\\n")


def _streams(store: Path) -> list[dict]:
    opened = Store(str(store), read_only=True)
    try:
        return [r.body["result"]["stdout"] for r in rows(opened) if r.kind == "result"]
    finally:
        opened.close()


@pytest.mark.sandboxes("bubblewrap", "landlock")
def test_output_that_is_not_utf8_is_recorded_as_its_bytes(box, make_host, sandbox, tmp_path):
    store = tmp_path / "state" / "store.db"
    host = make_host(
        allow_all=True, config=Config(sandbox=sandbox, store=StoreConfig(path=str(store)))
    )
    result = host.run(ExecRequest(PRINTF, str(box.ws)))
    assert result.exit_code == 0, result.stderr.text
    assert result.stdout.text == "caf\ufffd \ufffd\ufffd end\n"  # what a terminal is shown
    digest = hashlib.sha256(BYTES).hexdigest()
    assert (result.stdout.sha256, result.stdout.total_bytes) == (digest, len(BYTES))
    assert result.stdout.spill_path and Path(result.stdout.spill_path).read_bytes() == BYTES
    plain = host.run(ExecRequest(("/usr/bin/printf", "plain\\n"), str(box.ws)))
    assert plain.stdout.spill_path is None  # the control: UTF-8 needs no file of its own
    odd, control = _streams(store)
    assert odd["blob"] == odd["sha256"] == digest and odd["total_bytes"] == len(BYTES)
    opened = Store(str(store), read_only=True)
    try:
        assert get_blob(opened, odd["blob"]) == BYTES
        assert get_blob(opened, control["blob"]) == b"plain\n"
        assert verify(opened).ok
    finally:
        opened.close()


@pytest.mark.sandboxes("bubblewrap", "landlock")
def test_stockade_show_prints_the_bytes(box, sandbox, tmp_path):
    store = tmp_path / "state" / "store.db"
    config = tmp_path / "config.toml"
    config.write_text(f'sandbox = "{sandbox}"\n[store]\npath = "{store}"\n')
    env = {**os.environ, "STOCKADE_CONFIG": str(config)}

    def stockade(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [*CLI, *args], capture_output=True, cwd=box.ws, env=env, timeout=120, check=False
        )

    ran = stockade("run", "--", *PRINTF)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "caf\ufffd \ufffd\ufffd end\n".encode()  # the text
    opened = Store(str(store), read_only=True)
    try:
        [step] = [(r.run_id, r.step) for r in rows(opened) if r.kind == "result"]
    finally:
        opened.close()
    shown = stockade("show", step[0], str(step[1]))
    assert shown.returncode == 0 and shown.stdout == BYTES, shown.stderr
