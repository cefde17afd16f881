"""A ``credentials.env_prefix`` of the user's own through the warm server: its variables
look like secrets, so the client withholds them from the call, and the server's broker asks
the client for the one a command needs, by name, for that call only.

The same command runs through the server and in-process (``--no-server``): the same output,
status and error. The controls: the call frame never carries the variable; a name the
client did not withhold, or that it does not have, is answered with nothing.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator

import pytest

from helpers.server import FULL, Stockade, stockade_for
from stockade.cli.client import env_answer, needed_env, withheld

VALUE = "canary-7f3e0b"


@pytest.fixture(scope="module")
def sk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stockade]:
    root = tmp_path_factory.mktemp("prefix")
    with stockade_for(root) as found:
        (root / "config.toml").write_text('[credentials]\nenv_prefix = "MYAPP_"\n')
        yield found


def both(sk: Stockade, env: dict[str, str], *argv: str) -> list[tuple[int, bytes, bytes]]:
    """``stockade --config config.toml ARGV`` through the server, then in-process."""
    found = []
    for server in (True, False):
        done: subprocess.CompletedProcess[bytes] = sk.run(
            "--config", "config.toml", *argv, server=server, env=env
        )
        found.append((done.returncode, done.stdout, done.stderr))
    return found


CHECK = ("run", "--yes", "--mode", FULL, "--secret", "GIVEN=api-key", "--")


def test_a_withheld_prefix_variable_reaches_the_command_through_the_server(sk: Stockade) -> None:
    env = {"MYAPP_API_KEY": VALUE}
    assert withheld("MYAPP_API_KEY")  # the case: the client leaves it out of the call
    script = 'printf %s "$GIVEN" | sha256sum'  # the value itself is refused in an argv
    served, in_process = both(sk, env, *CHECK, "sh", "-c", script)
    digest = hashlib.sha256(VALUE.encode()).hexdigest()
    assert served == in_process == (0, f"{digest}  -\n".encode(), b""), served
    assert b"in-process" not in served[2]
    assert sk.server_pid() is not None  # it did run through the server


def test_a_missing_prefix_variable_fails_alike(sk: Stockade) -> None:
    served, in_process = both(sk, {}, *CHECK, "true")
    assert served == in_process, (served, in_process)
    assert served[0] != 0
    assert b"MYAPP_API_KEY" in served[2]  # the hint names the variable to set


def test_the_call_never_carries_a_withheld_variable() -> None:
    env = {"MYAPP_API_KEY": VALUE, "PATH": "/bin", "STOCKADE_SECRET_X": "y"}
    assert needed_env(env) == {"PATH": "/bin", "STOCKADE_SECRET_X": "y"}


@pytest.mark.parametrize(
    ("name", "value"),
    [("MYAPP_API_KEY", VALUE), ("PATH", None), ("MYAPP_OTHER_TOKEN", None), (3, None)],
)
def test_the_client_answers_only_for_a_variable_it_withheld_and_has(name, value) -> None:
    # PATH went with the call already; the other token is withheld but not set here.
    env = {"MYAPP_API_KEY": VALUE, "PATH": "/bin"}
    answer = env_answer({"type": "env", "name": name}, env)
    assert answer["type"] == "env"
    assert answer["value"] == value
