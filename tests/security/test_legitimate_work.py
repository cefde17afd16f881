"""The kit's ordinary work (:mod:`stockade.conformance.suite.test_legitimate_work`), and the
facts bubblewrap reports through the command line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from stockade.conformance.suite.test_legitimate_work import *  # noqa: F403


@pytest.mark.sandboxes("bubblewrap")  # bwrap's own facts: runner_failed comes from it
def test_cli_reports_the_facts_in_json(box):
    env = {**os.environ, "HOME": str(box.home), "XDG_CONFIG_HOME": str(box.root / "cfg")}
    env.pop("STOCKADE_CONFIG", None)
    env.pop("STOCKADE_DISABLE_PLUGINS", None)
    stockade = [sys.executable, "-c", "from stockade.cli import entry; entry()"]

    def run(*argv):
        proc = subprocess.run(
            [
                *stockade,
                "run",
                "--sandbox",
                "bubblewrap",
                "--mode",
                "workspace-write",
                "--json",
                "--yes",
                "--",
                *argv,
            ],
            cwd=box.ws,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return json.loads(proc.stdout)

    ok = run("sh", "-c", "echo hi > made.txt && cat made.txt")
    assert ok["exit_code"] == 0 and ok["stdout"]["text"] == "hi\n"
    assert ok["sandbox"] == {
        "provider": "bubblewrap",
        "mode": "workspace-write",
        "enforcement": "full",
        "missing": [],
        "denied": False,
        "runner_failed": False,
        "stale": False,
        "hidden": [],
        "writes": "layered",
        "protection": None,
    }
    denied = run("sh", "-c", f"echo x > {box.secret}")
    assert denied["exit_code"] != 0 and denied["sandbox"]["denied"] is True
    # A script whose #! interpreter exists nowhere: bwrap's execvp fails, not the command.
    script = box.ws / "orphan.sh"
    script.write_text("#!/nonexistent/stockade-interpreter\n")
    script.chmod(0o755)
    failed = run(str(script))
    assert failed["sandbox"]["runner_failed"] is True
    assert failed["stderr"]["text"].startswith("bwrap: ")
    # A program in the host's /tmp is not in the sandbox's private /tmp: refused before
    # bwrap starts (tests/security/test_hidden_paths.py has the rest).
    hidden = shutil.copy("/bin/true", "/tmp/stockade-test-true")
    try:
        refused = run(hidden)
    finally:
        os.unlink(hidden)
    assert refused["error"]["code"] == "spawn_failed"
    assert refused["error"]["details"]["folder"] == "/tmp"
