"""Run one command with a lot of output through a Host; print the result and the peak RSS.

Usage: big_output.py SPILL_DIR ARGV_JSON. Runs in its own interpreter so that its peak
RSS measures the host alone (the writer is a child, counted elsewhere).
"""

from __future__ import annotations

import json
import sys

from stockade.config.schema import Config, OutputConfig
from stockade.host import Host
from stockade.request.spec import ExecRequest
from stockade.testing import AllowAll


def peak_kb() -> int:
    """This image's peak RSS (``VmHWM``). Not ``ru_maxrss``: Linux carries that across
    ``execve`` from the process it was forked from (a test runner grown large), so it can
    report a peak this interpreter never had."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


spill_dir, argv = sys.argv[1], json.loads(sys.argv[2])
config = Config(output=OutputConfig(spill_dir=spill_dir))
with Host(config, plugins=[AllowAll()]) as host:
    result = host.run(ExecRequest(argv, mode="danger-full-access", timeout=300))
out = result.stdout
print(
    json.dumps(
        {
            "rss_kb": peak_kb(),
            "limit": config.output.limit,
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "total_bytes": out.total_bytes,
            "sha256": out.sha256,
            "truncated": out.truncated,
            "spill_path": out.spill_path,
            "text": out.text,
        }
    )
)
