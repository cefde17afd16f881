"""A system secret that goes away between confine and start (a lock file removed meanwhile,
as shadow-utils' ``/etc/shadow.lock`` is): bwrap cannot mount its mask over a path no longer
there, and fails before the command starts. The host then confines the command again, once,
with the host as it is now: the command runs, and what is still there stays masked.

The control runs the same sequence with the retry taken away: bwrap's refusal comes back,
so the test sees the race it closes."""

from __future__ import annotations

import pytest

from stockade.config.schema import Config

READ = (
    "import sys\n"
    "for p in sys.argv[1:]:\n"
    "    try: print(p, open(p).read())\n"
    "    except OSError as e: print(p, type(e).__name__)\n"
)


def _prepared(make_host, box):
    """A host whose system secrets are ``keys/*.key``, and a command prepared (its masks
    listed) while ``gone.key`` and ``kept.key`` (the canary) are there."""
    keys = box.outside / "keys"
    keys.mkdir()
    (keys / "gone.key").write_text("lock")
    (keys / "kept.key").write_text(box.canary)
    config = Config(sandbox=box.sandbox, system_secrets=(str(keys / "*.key"),))
    host = make_host(allow_all=True, config=config)
    request = box.py(READ, str(keys / "gone.key"), str(keys / "kept.key"), mode="read-only")
    return host, host.prepare(host.admit(request)), keys


@pytest.mark.sandboxes("bubblewrap")
def test_a_secret_removed_after_confine_runs_the_command_confined_again(make_host, box):
    host, prepared, keys = _prepared(make_host, box)
    (keys / "gone.key").unlink()  # after the masks were listed, before bwrap mounts them
    carried = host.carry_out(prepared)
    result = host.recording.result(carried)
    assert result.exit_code == 0, result.stderr.text
    assert f"{keys / 'gone.key'} FileNotFoundError" in result.stdout.text
    assert box.canary not in result.stdout.text  # the secret still there is still masked
    assert result.sandbox.runner_failed is False


@pytest.mark.sandboxes("bubblewrap")
def test_the_control_without_the_retry_meets_bwraps_refusal(make_host, box):
    host, prepared, keys = _prepared(make_host, box)
    (keys / "gone.key").unlink()
    prepared.confined = None  # the retry taken away
    result = host.recording.result(host.carry_out(prepared))
    assert result.exit_code == 1
    assert result.stderr.text.startswith(f"bwrap: Can't create file at {keys / 'gone.key'}")
    assert result.sandbox.runner_failed and result.sandbox.stale


@pytest.mark.sandboxes("bubblewrap")
def test_a_command_that_fails_on_its_own_is_not_run_again(make_host, box):
    """Only bwrap's own refusal, naming a path now absent, with nothing else written: a
    command printing other things, or naming a path that is there, runs once."""
    marker = box.ws / "ran"
    script = (
        "import sys, pathlib\n"
        f"p = pathlib.Path({str(marker)!r})\n"
        "p.write_text(p.read_text() + 'x' if p.exists() else 'x')\n"
        'sys.stderr.write("bwrap: Can\'t create file at /etc/passwd: Read-only file system\\n")\n'
        "sys.exit(1)\n"
    )
    host = make_host(allow_all=True, config=Config(sandbox=box.sandbox))
    result = host.run(box.py(script, mode="workspace-write"))
    assert result.exit_code == 1
    assert marker.read_text() == "x"  # once: /etc/passwd is there, so nothing went stale
