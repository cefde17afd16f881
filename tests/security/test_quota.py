"""A workspace quota holds: a command that writes past ``quota_mb`` is stopped while it
runs, and a workspace over its quota takes no more, from a command or the file tools."""

from __future__ import annotations

import attrs
import pytest

from stockade.config.schema import Config, StoreConfig
from stockade.errors import StockadeError
from stockade.request.spec import Profile
from stockade.run.quota import MIB, usage
from stockade.workspace.files import Workspace

from .conftest import PYTHON

# Writes 1 MiB at a time, fsyncing so the blocks are allocated, up to 400 MiB.
FLOOD = (
    "import os, sys\n"
    "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)\n"
    "chunk = os.urandom(1 << 20)\n"
    "for i in range(400):\n"
    "    os.write(fd, chunk)\n"
    "    os.fsync(fd)\n"
    "print('WROTE ALL')\n"
)


def _agent(box, make_host, quota_mb=8):
    config = Config(
        sandbox=box.sandbox,
        store=StoreConfig(str(box.root / "state" / "store.db")),
        agents={"bot": Profile(name="bot", workspace=str(box.ws), quota_mb=quota_mb)},
    )
    return make_host(allow_all=True, config=config)


def _run(host, box, argv):
    return host.run(box.request(argv, profile="bot"))


def test_a_command_writing_past_the_quota_is_stopped_and_the_result_says_so(box, make_host):
    host = _agent(box, make_host)
    # The control: a write that fits runs to its end.
    small = _run(host, box, [PYTHON, "-S", "-c", "open('small', 'wb').write(b'x' * 65536)"])
    assert small.ok and small.limit_hit is None, small.stderr.text
    result = _run(host, box, [PYTHON, "-S", "-c", FLOOD, "big"])
    assert result.limit_hit == "quota", result
    assert not result.ok and not result.aborted
    assert "WROTE ALL" not in result.stdout.text
    assert (box.ws / "big").stat().st_size < 200 * MIB  # stopped long before the end


def test_a_workspace_over_its_quota_takes_no_more_until_something_is_removed(box, make_host):
    (box.ws / "filler").write_bytes(b"\1" * (9 * MIB))  # over the 8 MiB quota already
    assert usage(str(box.ws)) > 8 * MIB
    host = _agent(box, make_host)
    grow = _run(host, box, [PYTHON, "-S", "-c", FLOOD, "more"])
    assert grow.limit_hit == "quota" and not grow.ok
    with Workspace(str(box.ws), quota_mb=8) as workspace, pytest.raises(StockadeError) as error:
        workspace.file_write("note.txt", "x" * 1000)
    assert error.value.code == "quota_exceeded"
    assert "quota" in error.value.message and not (box.ws / "note.txt").exists()
    # Removing is always allowed, and then writes fit again.
    (box.ws / "more").unlink(missing_ok=True)
    removed = _run(host, box, ["rm", "filler"])
    assert removed.ok and removed.limit_hit is None, removed.stderr.text
    with Workspace(str(box.ws), quota_mb=8) as workspace:
        assert workspace.file_write("note.txt", "fits").changed


def test_the_caller_can_still_abort_a_command_under_a_quota(box, make_host):
    import threading

    from stockade.run.executor import AbortToken

    host = _agent(box, make_host, quota_mb=1000)
    token = AbortToken()
    threading.Timer(0.5, token.abort).start()
    request = attrs.evolve(box.request(["sleep", "30"], profile="bot"))
    result = host.run(request, abort=token)
    assert result.aborted and result.limit_hit is None
    assert result.duration_ms < 20_000
