"""Output bounds: head and tail kept, the whole stream spilled privately, memory bounded."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest

from stockade.config import Config, OutputConfig
from stockade.types import ExecRequest

FULL = "danger-full-access"


def _small(host_with, limit):
    return host_with(Config(output=OutputConfig(limit=limit)))


def test_exactly_at_limit_is_kept_whole(host_with):
    result = _small(host_with, 1024).run(ExecRequest(["head", "-c", "1024", "/dev/zero"],
                                                     mode=FULL))
    assert not result.stdout.truncated
    assert result.stdout.spill_path is None
    assert result.stdout.total_bytes == 1024


def test_one_past_limit_spills_privately_with_head_and_tail(host_with):
    script = "import sys; sys.stdout.write('H' * 600 + 'M' * 425 + 'T' * 600)"
    result = _small(host_with, 1024).run(ExecRequest([sys.executable, "-c", script], mode=FULL))
    out = result.stdout
    stream = ("H" * 600 + "M" * 425 + "T" * 600).encode()
    assert out.truncated and out.total_bytes == len(stream)
    assert out.text.startswith("H" * 512) and out.text.endswith("T" * 512)
    assert "bytes omitted from the middle" in out.text and out.spill_path in out.text
    with open(out.spill_path, "rb") as f:
        assert f.read() == stream
    assert out.sha256 == hashlib.sha256(stream).hexdigest()
    assert stat.S_IMODE(os.stat(out.spill_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(out.spill_path)).st_mode) == 0o700
    assert not result.stderr.truncated


def test_stderr_is_separate_and_bad_utf8_is_replaced(host):
    result = host.run(ExecRequest(["sh", "-c", r"printf 'a\377b'; printf err >&2"], mode=FULL))
    assert result.stdout.text == "a\ufffdb"
    assert result.stdout.total_bytes == 3
    assert result.stderr.text == "err"


BIG = textwrap.dedent(
    """
    import json, resource, sys
    from stockade.host import Host
    from stockade.testing import AllowAll
    from stockade.types import ExecRequest
    with Host(plugins=[AllowAll()]) as host:
        r = host.run(ExecRequest(["head", "-c", sys.argv[1], "/dev/zero"],
                                 mode="danger-full-access", timeout=300))
    print(json.dumps({"rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                      "total": r.stdout.total_bytes, "sha256": r.stdout.sha256,
                      "spill": r.stdout.spill_path, "truncated": r.stdout.truncated,
                      "text_len": len(r.stdout.text)}))
    """
)


@pytest.mark.slow
def test_one_gigabyte_of_output_in_bounded_memory():
    size = 1 << 30
    done = subprocess.run([sys.executable, "-c", BIG, str(size)], capture_output=True, text=True,
                          timeout=600, check=True)
    report = json.loads(done.stdout)
    try:
        assert report["total"] == size and report["truncated"]
        assert report["rss_kb"] < 200 * 1024, report["rss_kb"]
        assert report["text_len"] < 2 * 1024 * 1024
        expected = hashlib.sha256()
        zeros = bytes(1 << 20)
        for _ in range(size >> 20):
            expected.update(zeros)
        assert report["sha256"] == expected.hexdigest()
        assert os.path.getsize(report["spill"]) == size
        spilled = hashlib.sha256()
        with open(report["spill"], "rb") as f:
            while chunk := f.read(1 << 22):
                spilled.update(chunk)
        assert spilled.hexdigest() == report["sha256"]
    finally:
        if report.get("spill"):
            os.unlink(report["spill"])


def test_output_spill_dir_from_config_is_used(host_with, tmp_path):
    config = Config(output=OutputConfig(limit=1024, spill_dir=str(tmp_path)))
    result = host_with(config).run(ExecRequest(["head", "-c", "5000", "/dev/zero"], mode=FULL))
    assert os.path.dirname(os.path.dirname(result.stdout.spill_path)) == str(tmp_path)
