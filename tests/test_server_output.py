"""Through the warm server, the command line says exactly what it says in-process.

Each case runs the same ``stockade`` command line twice against one state folder: through
the server (a real client process, the server started on first use) and in-process
(``STOCKADE_NO_SERVER=1``), and compares the exit status, stdout and stderr byte for byte
(``--json`` modulo the ids and durations that differ between any two runs, and the
``changes`` the server lists where in-process there are none). The server's own
count of calls served proves each client was served by it, not quietly run in-process.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from helpers.server import FULL, STOCKADE, Stockade, stockade_for

RUN = ("run", "--yes", "--mode", FULL, "--")
VARYING = frozenset({"action_id", "run_id", "duration_ms", "created", "started", "ended"})
"""Keys whose values differ between any two runs of one command."""


@pytest.fixture
def sk(tmp_path: Path) -> Iterator[Stockade]:
    with stockade_for(tmp_path) as found:
        yield found


def served(sk: Stockade) -> int:
    """How many calls the running server has served."""
    done = sk.run("serve", "--status", "--json", server=False)
    assert done.returncode == 0, done.stdout + done.stderr
    status = json.loads(done.stdout)
    assert status["running"] is True
    return int(status["calls_served"])


def both_ways(sk: Stockade, *args: str) -> tuple[Any, Any]:
    """``stockade ARGS`` through the server, then in-process; both finished processes."""
    before = served(sk) if sk.server_pid() is not None else 0
    via = sk.run(*args)
    assert served(sk) == before + 1, f"the server did not serve {args}: {via.stderr!r}"
    local = sk.run(*args, server=False)
    return via, local


def same(sk: Stockade, *args: str) -> Any:
    via, local = both_ways(sk, *args)
    assert via.returncode == local.returncode
    assert via.stdout == local.stdout
    assert via.stderr == local.stderr
    return via


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        ((*RUN, "sh", "-c", "echo out; echo err >&2; exit 7"), 7),
        ((*RUN, "true"), 0),
        ((*RUN, "sh", "-c", "kill -9 $$"), 128 + 9),
        (("run", "--mode", FULL, "--timeout", "0.2", "--", "sleep", "5"), 124),
    ],
)
def test_exit_status_and_both_streams_are_the_same(sk: Stockade, argv, status) -> None:
    done = same(sk, *argv)
    assert done.returncode == status


def test_output_that_is_not_utf8_comes_through_byte_for_byte(sk: Stockade) -> None:
    script = r"printf 'a\377\376b\n\300\n'; printf 'e\200\351rr' >&2"
    done = same(sk, *RUN, "sh", "-c", script)
    # the in-process CLI shows an undecodable byte as U+FFFD; so does the server's client
    assert done.stdout == "a\ufffd\ufffdb\n\ufffd\n".encode()
    assert done.stderr == "e\ufffd\ufffdrr".encode()


def test_a_megabyte_of_output_comes_through_whole(sk: Stockade) -> None:
    # lines of differing bytes, so a lost or repeated frame shows as a mismatch
    script = "import sys\nfor i in range(20000): sys.stdout.write(f'{i:07d}' + 'x' * 42 + '\\n')"
    done = same(sk, *RUN, "python3", "-c", script)
    assert len(done.stdout) == 1_000_000
    assert done.stdout.splitlines()[-1].startswith(b"0019999")


def _normal(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("<varies>" if k in VARYING else _normal(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(item) for item in value]
    return value


def test_json_is_the_same_but_for_ids_and_durations(sk: Stockade) -> None:
    via, local = both_ways(
        sk, "run", "--json", *RUN[1:], "sh", "-c", "echo hi; echo there >&2; exit 3"
    )
    assert (via.returncode, via.stderr) == (local.returncode, local.stderr) == (3, b"")
    mine, theirs = json.loads(via.stdout), json.loads(local.stdout)
    assert mine["action_id"] != theirs["action_id"]  # two runs, truly
    # The one difference: the server keeps a watch on the folder, so the files a command of
    # the default profile changed are listed (test_server_changes.py); in-process, not.
    assert theirs["changes"] is None
    listed = mine["changes"]
    assert listed["method"] == "inotify"
    assert _normal({**mine, "changes": None}) == _normal(theirs)
    assert mine["stdout"]["text"] == "hi\n"
    # the layout too: the same keys in the same order, the same indentation
    extra = len(json.dumps(listed, indent=2).splitlines()) - 1
    assert len(via.stdout.splitlines()) == len(local.stdout.splitlines()) + extra


def test_a_json_error_is_the_same(sk: Stockade) -> None:
    done = same(sk, "run", "--json", "--mode", FULL, "--", "no-such-program-x")
    assert done.returncode == 127


@pytest.mark.parametrize(
    ("argv", "status", "says"),
    [
        (("run", "--mode", FULL, "--", "no-such-program-x"), 127, b"program not found"),
        (("run", "--mode", "sideways", "--", "true"), 125, b"error[usage]"),
        (("run",), 125, b"run needs a program"),
        (("run", "--bogus", "--", "true"), 125, b"unrecognized arguments: --bogus"),
        (("decline",), 125, b"the following arguments are required"),
        (("approve", "nope", "1"), 125, b"no held step nope 1"),
        (("run", "--mode", FULL, "--cwd", "/nonexistent", "--", "true"), 125, b"bad_cwd"),
        (("run", "--mode", FULL, "--memory-mb", "0", "--", "true"), 125, b"memory_mb"),
    ],
)
def test_refusals_are_the_same(sk: Stockade, argv, status, says) -> None:
    done = same(sk, *argv)
    assert done.returncode == status
    assert says in done.stderr


def test_a_denied_command_is_refused_the_same(sk: Stockade, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[agents.default]\nprograms = ["echo"]\n')
    done = same(sk, "--config", str(config), "run", "--mode", FULL, "--", "sh", "-c", "true")
    assert done.returncode == 126
    assert b"error[policy_denied]" in done.stderr
    assert b"sh is not in agents.default.programs" in done.stderr


def test_a_held_command_is_refused_the_same_but_for_its_run(sk: Stockade) -> None:
    via, local = both_ways(sk, "run", "--mode", FULL, "--", "sh", "-c", "echo never; rm -f none")
    assert via.returncode == local.returncode == 126
    assert (via.stdout, local.stdout) == (b"", b"")
    [mine, theirs] = sk.steps()
    for done, step in ((via, mine), (local, theirs)):
        assert done.stderr.replace(step["run_id"].encode(), b"RUN") == (
            b"stockade: error[policy_held]: held for a person's approval as step 1 of run RUN: "
            b"destroys always waits for a person\n  hint: a person runs it with `stockade "
            b"approve RUN 1` or refuses it with `stockade decline RUN 1`; `stockade pending` "
            b"lists what waits\n"
        )


def test_fifty_clients_at_once_each_get_their_own_output(sk: Stockade) -> None:
    sk.run(*RUN, "true")  # start the server first: fifty clients racing to start it is another test
    before = served(sk)

    def one(n: int) -> tuple[int, Any]:
        return n, sk.run(
            "run", "--yes", "--mode", FULL, "--env", f"N={n}", "--", "sh", "-c", 'echo "$N"'
        )

    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(one, range(50)))
    for n, done in results:
        assert (done.returncode, done.stdout, done.stderr) == (0, f"{n}\n".encode(), b"")
    assert served(sk) == before + 50
    steps = [s for s in sk.steps() if s["argv"] == ["sh", "-c", 'echo "$N"']]
    assert len(steps) == 50
    assert {s["state"] for s in steps} == {"ran"}
    assert len({s["run_id"] for s in steps}) == 50  # a run of its own per call
    # each recorded result holds its own command's output, once
    [store] = sk.state.rglob("store.db")
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        bodies = [
            json.loads(b) for (b,) in db.execute("SELECT body FROM events WHERE kind = 'result'")
        ]
    finally:
        db.close()
    mine = [b["result"] for b in bodies if b["result"]["argv"] == ["sh", "-c", 'echo "$N"']]
    recorded = sorted(r["stdout"]["sha256"] for r in mine)
    assert recorded == sorted(hashlib.sha256(f"{n}\n".encode()).hexdigest() for n in range(50))
    # and the chain the fifty wrote at once holds, link by link
    verified = sk.run("verify", server=False)
    assert verified.returncode == 0, verified.stdout
    assert b"links hold" in verified.stdout


HEX = b'printf "%s|%s" "$A" "$ODD" | od -An -tx1 | tr -d " \\n"'


def test_bytes_that_are_not_utf8_in_the_clients_environment_travel_as_in_process(
    sk: Stockade, tmp_path: Path
) -> None:
    # the client's environment and --env carry undecodable bytes: they go over the socket as
    # JSON and must reach the command as they would in-process
    config = tmp_path / "config.toml"
    config.write_text('[env]\nallow = ["ODD"]\n')
    results = []
    for server in (True, False):
        env = {os.fsencode(k): os.fsencode(v) for k, v in sk.environ(server=server).items()}
        env[b"ODD"] = b"odd-\xff"
        argv = [*map(os.fsencode, STOCKADE), b"--config", bytes(config), *map(str.encode, RUN)]
        argv[-1:] = [b"--env", b"A=\xff\xfe", b"--", b"sh", b"-c", HEX]
        results.append(
            subprocess.run(
                argv,
                env=env,
                capture_output=True,
                cwd=sk.root,
                stdin=subprocess.DEVNULL,
                timeout=120,
                check=False,
            )
        )
    via, local = results
    assert (via.returncode, via.stdout, via.stderr) == (
        local.returncode,
        local.stdout,
        local.stderr,
    )
    assert via.returncode == 0, via.stderr
    assert via.stdout == b"fffe7c6f64642dff"  # the very bytes, in hex
    assert sk.server_pid() is not None
