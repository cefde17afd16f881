"""``Workspace.file_bytes``: a file's bytes exactly as stored (text or binary), refused as
``file_read`` refuses. Its paths are fuzzed with the other tools' in ``test_files_escapes.py``."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from stockade.errors import UsageError
from stockade.workspace.files import Workspace


@pytest.fixture(params=["walk", "auto"])
def ws(tmp_path, request):
    root = tmp_path / "ws"
    root.mkdir()
    with Workspace(str(root), resolver=request.param) as workspace:
        yield workspace


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=3 * 1024), offset=st.integers(0, 4096))
@example(data=b"\x00\xff\xfe\x80" * 700, offset=0)
def test_file_bytes_gives_the_bytes_as_stored(ws, data, offset):
    ws.file_write("blob", data)
    assert ws.file_bytes("blob") == data
    assert ws.file_bytes("blob", offset=offset, limit=7) == data[offset : offset + 7]
    os.link(os.path.join(ws.root, "blob"), os.path.join(ws.root, "second"))
    with pytest.raises(UsageError, match="hard links"):  # refused as file_read refuses
        ws.file_bytes("blob")
    os.unlink(os.path.join(ws.root, "second"))


def test_a_symlink_out_and_bad_ranges_are_refused(ws, tmp_path):
    (tmp_path / "outside").write_bytes(b"canary")
    os.symlink(tmp_path / "outside", os.path.join(ws.root, "out"))
    with pytest.raises(UsageError):
        ws.file_bytes("out")
    ws.file_write("in", b"\x00\xff")
    for offset, limit in ((-1, 1), (0, 0), (0, 256 * 1024 + 1)):
        with pytest.raises(UsageError):
            ws.file_bytes("in", offset=offset, limit=limit)
    assert ws.file_bytes("in", offset=2) == b""  # past the end: empty, not an error
