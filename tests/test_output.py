"""Output bounds: head and tail kept, the whole stream spilled privately, memory bounded."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stockade.config.schema import Config, OutputConfig, PluginsConfig
from stockade.request.spec import ExecRequest

FULL = "danger-full-access"
HELPERS = Path(__file__).parent / "helpers"


def _small(host_with, limit, **output):
    return host_with(Config(output=OutputConfig(limit=limit, **output)))


def _write(data: bytes, fd: int = 1) -> ExecRequest:
    """A command that writes exactly ``data`` to ``fd`` (1 or 2)."""
    script = f"import os, sys; os.write({fd}, bytes.fromhex(sys.argv[1]))"
    return ExecRequest([sys.executable, "-c", script, data.hex()], mode=FULL)


def _marker(omitted: int, total: int, path: str) -> str:
    return (
        f"\n[stockade: {omitted} bytes omitted from the middle; "
        f"the whole stream ({total} bytes) is in {path}]\n"
    )


def _private(path: str) -> None:
    """The spill file is owner-only in an owner-only directory, both randomly named."""
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.stat(path).st_uid == os.getuid()
    directory = os.path.dirname(path)
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert os.stat(directory).st_uid == os.getuid()
    assert re.fullmatch(r"stockade-spill-[A-Za-z0-9_]{8,}", os.path.basename(directory))
    assert re.fullmatch(r"(stdout|stderr)-[A-Za-z0-9_]{8,}\.out", os.path.basename(path))


def test_exactly_at_limit_is_kept_whole(host_with):
    data = bytes(range(32, 127)) * 10 + b"0123456789"  # 960 bytes
    assert len(data) == 960
    result = _small(host_with, 960).run(_write(data))
    out = result.stdout
    assert (out.truncated, out.spill_path, out.total_bytes) == (False, None, 960)
    assert out.text == data.decode()
    assert out.sha256 == hashlib.sha256(data).hexdigest()


def test_one_byte_past_the_limit_is_truncated_and_spilled(host_with):
    data = b"H" * 480 + b"X" + b"T" * 480  # 961 bytes against a limit of 960
    out = _small(host_with, 960).run(_write(data)).stdout
    assert (out.truncated, out.total_bytes) == (True, 961)
    assert out.spill_path is not None
    assert out.text == "H" * 480 + _marker(1, 961, out.spill_path) + "T" * 480
    assert Path(out.spill_path).read_bytes() == data
    assert out.sha256 == hashlib.sha256(data).hexdigest()
    _private(out.spill_path)


def test_long_output_keeps_the_head_and_the_tail_exactly(host_with):
    data = b"".join(f"line {i:05d}\n".encode() for i in range(5000))  # 55,000 bytes
    out = _small(host_with, 1000).run(_write(data)).stdout
    assert out.truncated
    assert out.total_bytes == len(data)
    assert out.text == (
        data[:500].decode()
        + _marker(len(data) - 1000, len(data), out.spill_path)
        + data[-500:].decode()
    )
    assert Path(out.spill_path).read_bytes() == data


def test_odd_limit_splits_head_and_tail(host_with):
    data = bytes(range(65, 91)) * 4  # 104 bytes, limit 7: head 3, tail 4
    out = _small(host_with, 7).run(_write(data)).stdout
    assert out.text == "ABC" + _marker(97, 104, out.spill_path) + "WXYZ"


def test_stderr_is_separate_and_bad_utf8_is_replaced(host):
    result = host.run(ExecRequest(["sh", "-c", r"printf 'a\377b'; printf err >&2"], mode=FULL))
    assert result.stdout.text == "a\ufffdb"
    assert result.stdout.total_bytes == 3
    assert result.stdout.sha256 == hashlib.sha256(b"a\xffb").hexdigest()
    assert result.stderr.text == "err"
    assert result.stderr.sha256 == hashlib.sha256(b"err").hexdigest()


def test_invalid_utf8_in_a_truncated_stream_does_not_crash(host_with):
    data = b"\xff\xfe" * 100 + "é".encode() * 100  # 400 bytes of mostly invalid UTF-8
    out = _small(host_with, 10).run(_write(data)).stdout
    assert out.truncated and out.total_bytes == 400
    # head: ff fe ff fe ff; tail: a9 c3 a9 c3 a9 (a split "é" first)
    assert out.text == "\ufffd" * 5 + _marker(390, 400, out.spill_path) + "\ufffdéé"
    assert Path(out.spill_path).read_bytes() == data


def test_stderr_is_bounded_and_spilled_on_its_own(host_with):
    data = b"E" * 3000
    result = _small(host_with, 100).run(_write(data, fd=2))
    err, out = result.stderr, result.stdout
    assert (out.text, out.truncated, out.total_bytes) == ("", False, 0)
    assert err.truncated and err.total_bytes == 3000
    assert os.path.basename(err.spill_path).startswith("stderr-")
    assert err.text == "E" * 50 + _marker(2900, 3000, err.spill_path) + "E" * 50
    assert Path(err.spill_path).read_bytes() == data
    _private(err.spill_path)


def test_every_spill_gets_its_own_random_file(host_with, tmp_path):
    host = _small(host_with, 10, spill_dir=str(tmp_path))
    paths = [host.run(_write(b"x" * 50)).stdout.spill_path for _ in range(3)]
    assert len(set(paths)) == 3
    for path in paths:
        _private(path)
        assert Path(path).read_bytes() == b"x" * 50


def test_output_spill_dir_from_config_is_used(host_with, tmp_path):
    config = Config(output=OutputConfig(limit=1024, spill_dir=str(tmp_path)))
    result = host_with(config).run(ExecRequest(["head", "-c", "5000", "/dev/zero"], mode=FULL))
    assert os.path.dirname(os.path.dirname(result.stdout.spill_path)) == str(tmp_path)


def test_executor_spill_dir_setting_is_used(host_with, tmp_path):
    settings = {"local": {"spill_dir": str(tmp_path)}}
    config = Config(output=OutputConfig(limit=10), plugins=PluginsConfig(settings=settings))
    result = host_with(config).run(_write(b"y" * 100))
    assert os.path.dirname(os.path.dirname(result.stdout.spill_path)) == str(tmp_path)


# --- 1 GiB, in a separate process so its peak RSS is the host's alone ----------------------

BLOCK = 1 << 20
BLOCKS = 1024  # 1 GiB


def _block(i: int) -> bytes:
    """Block ``i`` of the big stream: ASCII, distinct per block, so order is checked."""
    header = f"<block {i:06d}>".encode()
    body = (b"abcdefghijklmnopqrstuvwxyz0123456789\n" * (BLOCK // 37 + 1))[: BLOCK - 2 * 14]
    return header + body + header


WRITER = textwrap.dedent(
    """
    import os, sys
    BLOCK = 1 << 20
    body = (b"abcdefghijklmnopqrstuvwxyz0123456789\\n" * (BLOCK // 37 + 1))[: BLOCK - 28]
    out = sys.stdout.buffer
    for i in range(int(sys.argv[1])):
        header = f"<block {i:06d}>".encode()
        out.write(header + body + header)
    out.flush()
    """
)


@pytest.mark.slow
def test_one_gigabyte_of_output_in_bounded_memory(tmp_path):
    assert len(_block(0)) == BLOCK
    writer = [sys.executable, "-c", WRITER, str(BLOCKS)]
    done = subprocess.run(
        [sys.executable, str(HELPERS / "big_output.py"), str(tmp_path), json.dumps(writer)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    spill = report["spill_path"]
    try:
        expected = hashlib.sha256()
        for i in range(BLOCKS):
            expected.update(_block(i))
        size = BLOCK * BLOCKS
        assert report["exit_code"] == 0 and not report["timed_out"]
        assert report["total_bytes"] == size
        assert report["truncated"] is True
        assert report["sha256"] == expected.hexdigest()
        assert report["rss_kb"] < 200 * 1024, f"peak RSS {report['rss_kb']} KiB"
        limit = report["limit"]
        head = _block(0)[: limit // 2].decode()
        tail = _block(BLOCKS - 1)[-(limit - limit // 2) :].decode()
        assert report["text"] == head + _marker(size - limit, size, spill) + tail
        assert os.path.dirname(os.path.dirname(spill)) == str(tmp_path)
        _private(spill)
        assert os.path.getsize(spill) == size
        spilled = hashlib.sha256()
        with open(spill, "rb") as f:
            while chunk := f.read(1 << 22):
                spilled.update(chunk)
        assert spilled.hexdigest() == expected.hexdigest()
    finally:
        if spill:
            os.unlink(spill)
