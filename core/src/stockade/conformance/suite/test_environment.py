"""The environment contract: the command gets the spec's environment and nothing of the
host's, and no part of it is ever on a process's command line.

The host's own environment carries canaries (one with an ordinary name, one named like a
token); the command prints all it got. The control: a variable the request gives arrives.
For the command line, a credential the request gives is looked for in every process's
``/proc/PID/cmdline`` (readable by every user) while the command runs; the control: a word
on the command's own command line is found there by the same scan.
"""

from __future__ import annotations

import json
import os
import secrets

import pytest

from stockade.config.schema import Config
from stockade.confine.promises import Promise
from stockade.confine.provider import proxy_env
from stockade.conformance import procs
from stockade.policy.resolve import resolve

# What a provider may add to the spec's environment (its scratch, the proxy's variables,
# the working directory bwrap names),
# and what the executor adds (the run's mark, for its sweep).
ADDED = frozenset({"PWD", "TMPDIR", "XDG_CACHE_HOME", "STOCKADE_RUN_ID", *proxy_env(1, "/ca.pem")})

PRINT_ENV = "import json, os; print(json.dumps(dict(os.environ)))"


@pytest.mark.promise(Promise.ENVIRONMENT)
def test_the_hosts_environment_does_not_reach_the_command(make_host, box, mode, monkeypatch):
    tag = secrets.token_hex(4).upper()
    plain, token = f"KIT_HOST_{tag}", f"KIT_{tag}_API_TOKEN"
    monkeypatch.setenv(plain, box.canary + "-plain")
    monkeypatch.setenv(token, box.canary + "-token")
    given = f"KIT_GIVEN_{tag}"
    config = Config(sandbox=box.sandbox)
    host = make_host(allow_all=True, config=config)
    request = box.py(PRINT_ENV, mode=mode, env={given: "given"})
    result = host.run(request)
    assert result.exit_code == 0, result.stderr.text
    got = json.loads(result.stdout.text)
    assert got.get(given) == "given", got  # the control: the request's variable arrives
    assert box.canary not in json.dumps(got), sorted(got)
    spec = resolve(request, config, os.environ)
    extra = set(got) - set(spec.env) - ADDED
    assert not extra, f"the host's variables reached the command: {sorted(extra)}"
    for name in set(got) & set(spec.env) - ADDED:
        assert got[name] == spec.env[name], (name, got[name], spec.env[name])


# Says what it holds on its output (a layered run's files are not seen while it runs), then
# waits, so that the scan sees it alive; the kit kills it after.
WAIT = """
import os, sys, time
print("ready:" + os.environ.get(sys.argv[1], "missing"), flush=True)
time.sleep(30)
"""


def _cmdlines() -> str:
    """Every process's command line, as any user of the machine may read them."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    found.append(f.read().decode("latin-1"))
            except OSError:
                pass
    return "\n".join(found)


@pytest.mark.promise(Promise.CREDENTIALS_OFF_COMMAND_LINE)
def test_the_environment_is_never_on_a_command_line(host, box):
    name = "KIT_CRED_" + secrets.token_hex(4).upper()
    credential = box.canary + "-credential"
    word = "KIT-ARGV-" + secrets.token_hex(6)
    request = box.py(WAIT, name, word, env={name: credential})
    task = host.start(request, owner="kit")
    seen: list[str] = []

    def ready() -> bool:
        seen.append(host.read_output(task.task_id, owner="kit").stdout)
        return "\n" in "".join(seen)

    try:
        assert procs.wait_until(ready, timeout=30), "".join(seen)
        assert "".join(seen).strip() == "ready:" + credential  # the control: it holds it
        lines = _cmdlines()
        assert word in lines  # the control: the scan sees the run's command lines
        assert credential not in lines, "the credential is on a command line"
    finally:
        host.kill(task.task_id, owner="kit")
