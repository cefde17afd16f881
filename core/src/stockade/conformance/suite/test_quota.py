"""A workspace quota under the provider: the host watches the workspace and, once a command
writes past ``quota_mb``, aborts it; the provider's part is that the abort reaches every
process the command started, as the caller's own abort does."""

from __future__ import annotations

import os
import threading
import time

import pytest

from stockade.config.schema import Config, StoreConfig
from stockade.confine.promises import Promise
from stockade.conformance import procs
from stockade.request.spec import Profile
from stockade.run.executor import AbortToken

MIB = 1 << 20

# Writes 1 MiB at a time, fsyncing so the blocks are allocated, up to 400 MiB; a child
# process (a sleep named by the marker) shows whether the abort reached the whole command.
FLOOD = """
import os, subprocess, sys
subprocess.Popen(['sleep', sys.argv[2]])
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
chunk = os.urandom(1 << 20)
for i in range(400):
    os.write(fd, chunk)
    os.fsync(fd)
print('WROTE ALL')
"""


def _agent(box, make_host, quota_mb: int):
    config = Config(
        sandbox=box.sandbox,
        store=StoreConfig(str(box.root / "store" / "store.db")),
        agents={"bot": Profile(name="bot", workspace=str(box.ws), quota_mb=quota_mb)},
    )
    return make_host(allow_all=True, config=config)


def _marker() -> str:
    """An unusual duration (minutes) that names this test's ``sleep`` processes."""
    return f"{300 + os.getpid() % 600}.{time.monotonic_ns() % 100000}7"


@pytest.mark.promise(Promise.QUOTA)
def test_a_command_writing_past_the_quota_is_stopped_with_all_it_started(box, make_host):
    host = _agent(box, make_host, quota_mb=8)
    # The control: a write that fits runs to its end.
    small = host.run(box.py("open('small', 'wb').write(b'x' * 65536)", profile="bot"))
    assert small.ok and small.limit_hit is None, small.stderr.text
    marker = _marker()
    result = host.run(box.py(FLOOD, "big", marker, profile="bot"))
    assert result.limit_hit == "quota", result
    assert not result.ok and not result.aborted
    assert "WROTE ALL" not in result.stdout.text
    big = box.ws / "big"  # stopped long before the end (a layer over its quota lands nothing)
    assert (
        not big.exists() if result.sandbox.writes == "layered" else big.stat().st_size < 200 * MIB
    )
    assert procs.wait_until(lambda: not procs.sleeping(marker), timeout=30), "a child outlived it"


@pytest.mark.promise(Promise.QUOTA)
def test_the_caller_can_still_abort_a_command_under_a_quota(box, make_host):
    host = _agent(box, make_host, quota_mb=1000)
    marker = _marker()
    token = AbortToken()
    timer = threading.Timer(0.5, token.abort)
    timer.start()
    try:
        request = box.request(["sh", "-c", f"sleep {marker}; echo late"], profile="bot")
        result = host.run(request, abort=token)
    finally:
        timer.cancel()
    assert result.aborted and result.limit_hit is None, result
    assert "late" not in result.stdout.text
    assert procs.wait_until(lambda: not procs.sleeping(marker), timeout=30), "it outlived abort"
