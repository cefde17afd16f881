"""A system secret that goes away between confine and start (a lock file removed meanwhile,
as shadow-utils' ``/etc/shadow.lock`` is): bwrap cannot mount its mask over a path no longer
there, and refuses to start. The command never runs unmasked, and the facts say why
(``runner_failed`` and ``stale``). Nothing is run again by itself: a command can print
bwrap's words, and a second run would throw away what its first did."""

from __future__ import annotations

import pytest

from stockade.config.schema import Config

READ = (
    "import sys\n"
    "for p in sys.argv[1:]:\n"
    "    try: print(p, open(p).read())\n"
    "    except OSError as e: print(p, type(e).__name__)\n"
)


@pytest.mark.sandboxes("bubblewrap")
def test_a_secret_removed_after_confine_fails_closed_and_says_so(make_host, box):
    keys = box.outside / "keys"
    keys.mkdir()
    (keys / "gone.key").write_text("lock")
    (keys / "kept.key").write_text(box.canary)
    config = Config(sandbox=box.sandbox, system_secrets=(str(keys / "*.key"),))
    host = make_host(allow_all=True, config=config)
    request = box.py(READ, str(keys / "gone.key"), str(keys / "kept.key"), mode="read-only")
    prepared = host.prepare(host.admit(request))
    (keys / "gone.key").unlink()  # after the masks were listed, before bwrap mounts them
    result = host.recording.result(host.carry_out(prepared))
    assert result.exit_code == 1
    assert result.stderr.text.startswith(f"bwrap: Can't create file at {keys / 'gone.key'}")
    assert box.canary not in result.stdout.text + result.stderr.text  # it never ran
    assert result.sandbox.runner_failed and result.sandbox.stale
    again = host.run(request)  # asked again: the host as it is now
    assert again.exit_code == 0 and f"{keys / 'gone.key'} FileNotFoundError" in again.stdout.text
    assert box.canary not in again.stdout.text


@pytest.mark.sandboxes("bubblewrap")
def test_a_command_printing_bwraps_words_is_run_once(make_host, box):
    """The same line from a command (naming a path that is absent) is only a hint: the
    command ran once, and what it wrote stays."""
    marker = box.ws / "ran"
    script = (
        "import sys, pathlib\n"
        f"p = pathlib.Path({str(marker)!r})\n"
        "p.write_text(p.read_text() + 'x' if p.exists() else 'x')\n"
        "sys.stderr.write(\"bwrap: Can't create file at /nonexistent-stockade: Read-only file"
        ' system\\n")\n'
        "sys.exit(1)\n"
    )
    host = make_host(allow_all=True, config=Config(sandbox=box.sandbox))
    result = host.run(box.py(script, mode="workspace-write"))
    assert result.exit_code == 1 and result.sandbox.runner_failed
    assert marker.read_text() == "x"  # once, and landed
