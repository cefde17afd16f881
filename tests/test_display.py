"""A prompt that cannot lie: what a person reads shows every character, argv as shell words.

Unit and property tests of :mod:`stockade.display`, then the CLI's own bytes (the approval
prompt, ``pending``, ``log``, ``replay``, ``show``) and the MCP elicitation message rendered
through a real terminal emulator (pyte), each with a control: the same bytes written raw,
as before, on the same emulator, do hide the command.
"""

from __future__ import annotations

import errno
import json
import os
import select
import shlex
import subprocess
import unicodedata
from pathlib import Path
from typing import Any

import pyte
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stockade.display import (
    PLAIN,
    command,
    command_pieces,
    escape,
    hidden,
    pieces,
    quote,
    split,
    visible,
)
from stockade.testing import CLI

STOCKADE = [*CLI]  # the native client when the session runs through the server
FULL = "danger-full-access"
EVIL = "important\r\x1b[2K  run:    ls -la"
"""The argument that, printed raw, turns ``rm -rf`` into ``ls -la`` on the screen."""
ARGV = ["rm", "-rf", EVIL]
SHOWN = "rm -rf important$'\\r\\x1b''[2K  run:    ls -la'"
FLAGGED = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
NAMED = [
    *"\x00\x01\x07\x08\t\n\x0b\x0c\r\x1b\x7f\x80\x85\x9b\x9f",
    *"\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
    *"\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff\u00ad\u180e\u2028\u2029",
    *"\U000e0001\U000e0041\U000e007f\ufe0f\U000e0100\u034f\u3164\u115f\uffa0\u2800",
    *"\u00a0\u2007\u3000\ue000\U000f0000\ud800\udcff\u0378\U0010ffff",
]
"""Characters the brief names, and neighbours: each must be shown as an escape."""
CHAR = st.one_of(
    st.sampled_from([*NAMED, " ", "'", '"', "$", "\\", "\u0301", "\u20dd", "x", "é", "日"]),
    st.characters(exclude_categories=[]),  # every category, surrogates included
)
TEXT = st.text(CHAR)
"""Any text, with the characters that matter drawn often."""


# --- the module ---------------------------------------------------------------------------


@pytest.mark.parametrize("char", NAMED, ids=lambda c: f"U+{ord(c):04X}")
def test_every_named_hidden_character_is_escaped(char):
    for shown in (command(["x", f"a{char}b"]), quote(char), visible(f"a{char}b")):
        assert char not in shown
        assert escape(char) in shown
    assert split(command(["x", f"a{char}b"])) == ["x", f"a{char}b"]


def test_the_example_reads_as_rm_with_its_escapes():
    assert command(ARGV) == SHOWN
    assert split(SHOWN) == ARGV


def test_ordinary_text_stays_readable():
    assert command(["ls", "-l", "src/main.py"]) == "ls -l src/main.py"
    assert command(["cat", "café.txt", "日本語.md", "a b"]) == "cat 'café.txt' '日本語.md' 'a b'"
    assert command(["echo", "it's", ""]) == "echo 'it'\"'\"'s' ''"
    assert visible("naïve 日本 é e\u0301 עברית") == "naïve 日本 é e\u0301 עברית"
    assert visible("a\tb\nc", keep="\n\t") == "a\tb\nc"
    assert visible("a\tb\nc") == "a\\tb\\nc"


def test_combining_marks_stay_on_letters_but_not_on_quotes_or_spaces():
    assert quote("e\u0301") == "'e\u0301'"
    assert quote("\u0301e") == "$'\\u0301'e"  # it would sit on the opening quote
    assert visible("a \u20dd") == "a \\u20dd"  # an enclosing circle around a space
    assert visible("z" + "\u0301" * 6) == "z" + "\u0301" * 4 + "\\u0301" * 2


def test_pieces_name_each_escape_and_join_to_the_shown_text():
    found = pieces("a\u202eb")
    assert found == [("a", None), ("\\u202e", 0x202E), ("b", None)]
    assert "".join(p for p, _ in command_pieces(ARGV)) == SHOWN
    assert [code for _, code in command_pieces(ARGV) if code] == [0x0D, 0x1B]


def test_the_ranges_skipped_unchecked_hold_no_hidden_character_and_no_mark():
    for low, high in PLAIN:
        for code in range(low, high + 1):
            char = chr(code)
            assert not hidden(char) and not unicodedata.category(char).startswith("M"), hex(code)


def _shown_clean(shown: str) -> None:
    """No character of ``shown`` can rewrite, reorder or hide anything."""
    previous = " "
    for char in shown:
        category = unicodedata.category(char)
        assert category not in FLAGGED, f"U+{ord(char):04X} ({category}) in {shown!r}"
        assert not hidden(char), f"U+{ord(char):04X} in {shown!r}"
        if category.startswith("M"):
            assert previous not in " '\"$\\", f"a mark on {previous!r} in {shown!r}"
        previous = char


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(TEXT, max_size=4))
def test_any_argv_shows_clean_and_reads_back(argv):
    shown = command(argv)
    _shown_clean(shown)
    assert split(shown) == argv  # a left inverse: two different argvs never look alike
    for word in argv:
        _shown_clean(visible(word))
        _shown_clean(quote(word))


@settings(max_examples=300)
@given(st.lists(TEXT, max_size=3), st.data())
def test_different_argvs_never_show_the_same(argv, data):
    other = data.draw(st.lists(TEXT, max_size=3))
    if other != argv:
        assert command(other) != command(argv)


@settings(max_examples=300)
@given(st.text(st.characters(categories=["L", "N", "P", "S"]).filter(lambda c: not hidden(c))))
def test_letters_digits_punctuation_and_symbols_show_as_they_are(text):
    assert visible(text) == text


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (["a b"], ["a", "b"]),
        (["a\\x1b"], ["a\x1b"]),  # the escape typed out is not the character
        (["$'\\x1b'"], ["\x1b"]),
        (["a\u00a0b"], ["a b"]),
        (["x", ""], ["x"]),
        (["\udcff"], ["\u00ff"]),  # a byte that was not UTF-8 is not the letter
        (["\udcff"], ["\x7f"]),
    ],
)
def test_neighbours_that_would_look_alike_are_shown_apart(one, other):
    assert command(one) != command(other)
    assert (split(command(one)), split(command(other))) == (one, other)


# Strings a real argv can hold: no NUL; of surrogates only those standing for bytes that
# were not UTF-8 (Python's surrogateescape).
ARG = st.text(
    CHAR.filter(lambda c: c != "\x00").filter(
        lambda c: not 0xD800 <= ord(c) <= 0xDC7F and not 0xDD00 <= ord(c) <= 0xDFFF
    ),
    max_size=12,
)


@settings(max_examples=80, deadline=None)
@given(st.lists(ARG, min_size=1, max_size=3))
def test_bash_reads_the_shown_command_back_as_the_same_argv(argv):
    script = "printf '%s\\0' " + command(argv)
    out = subprocess.run(
        ["bash", "--norc", "-c", script],
        env={"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        check=True,
        timeout=30,
    ).stdout
    assert out == b"".join(os.fsencode(word) + b"\0" for word in argv)


# --- through a terminal emulator ----------------------------------------------------------


def screen(data: bytes, *, columns: int = 200, rows: int = 60) -> list[str]:
    """The lines a VT terminal shows after ``data``, right-trimmed."""
    shown = pyte.Screen(columns, rows)
    pyte.ByteStream(shown).feed(data)
    return [line.rstrip() for line in shown.display]


def raw(data: bytes, argv: list[str]) -> bytes:
    """``data`` as the CLI wrote it before: argv joined raw instead of shown escaped."""
    escaped = command(argv).encode()
    assert escaped in data
    return data.replace(escaped, shlex.join(argv).encode())


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The CLI's environment: a store of the test's own, no sandbox needed (nothing the
    tests ask to run is approved)."""
    environ = {
        **os.environ,
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "STOCKADE_DISABLE_PLUGINS": "bubblewrap,landlock",
        "TERM": "xterm",
    }
    environ.pop("STOCKADE_CONFIG", None)
    return environ


def at_terminal(args: list[str], env: dict[str, str], cwd: Path, answer: bytes = b"") -> bytes:
    """Every byte ``stockade ARGS`` writes to its controlling terminal (a pty) and stdout
    and stderr (the same pty); ``answer`` is typed at the approval prompt."""
    master, slave = os.openpty()
    try:
        process = subprocess.Popen(  # setsid -c: the pty becomes its controlling terminal
            ["setsid", "-w", "-c", *STOCKADE, *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=cwd,
        )
    finally:
        os.close(slave)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 120)
            assert ready, f"no output for 120 s; so far {out!r}"
            try:
                chunk = os.read(master, 65536)
            except OSError as error:  # EIO: every end of the pty is closed
                assert error.errno == errno.EIO
                break
            if not chunk:
                break
            out += chunk
            if answer and out.endswith(b"approve? [y/N] "):
                os.write(master, answer)
                answer = b""
    finally:
        os.close(master)
        process.wait(timeout=120)
    return out


def cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*STOCKADE, *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
        check=False,
    )


def held(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[str, int]:
    """Run ``argv`` with no terminal: it waits for a person; its run and step."""
    done = cli(["run", "--mode", FULL, "--json", "--", *argv], env, cwd)
    details = json.loads(done.stdout)["error"]["details"]
    assert json.loads(done.stdout)["error"]["code"] == "policy_held", done.stdout
    return details["run_id"], details["step"]


def assert_rm_is_seen(lines: list[str]) -> None:
    assert any(SHOWN in line for line in lines), lines
    assert not any(line.strip() == "run:    ls -la'" for line in lines)


def assert_rm_is_hidden(lines: list[str]) -> None:
    """The control: on the same emulator, the raw bytes show an ``ls`` and no ``rm``."""
    assert not any("rm -rf" in line for line in lines), lines
    assert any("  run:    ls -la'" in line for line in lines), lines


def test_the_approval_prompt_shows_rm_and_its_escapes(env, tmp_path):
    canary = tmp_path / EVIL
    canary.write_text("still here")
    out = at_terminal(["run", "--mode", FULL, "--", *ARGV], env, tmp_path, answer=b"n\n")
    assert b"approve? [y/N] " in out
    assert b"\x1b" not in out.split(b"approve?")[0]  # nothing before the question rewrites
    lines = screen(out)
    assert f"  run:    {SHOWN}" in lines
    assert_rm_is_seen(lines)
    assert_rm_is_hidden(screen(raw(out, ARGV)))
    assert canary.read_text() == "still here"  # declined: it did not run


def test_pending_log_and_replay_show_rm_and_its_escapes(env, tmp_path):
    run, step = held(ARGV, env, tmp_path)
    for args in (["pending"], ["log"], ["replay", run]):
        out = at_terminal(args, env, tmp_path)
        assert b"\x1b" not in out and b"\r" not in out.replace(b"\r\n", b""), args
        assert_rm_is_seen(screen(out))
        assert_rm_is_hidden(screen(raw(out, ARGV)))
    log = json.loads(cli(["log", "--json"], env, tmp_path).stdout)  # JSON stays exact
    assert [(s["run_id"], s["step"], s["argv"]) for s in log] == [(run, step, ARGV)]
    replay = json.loads(cli(["replay", run, "--json"], env, tmp_path).stdout)
    assert replay[0]["event"]["argv"] == ARGV
    assert replay[0]["text"].startswith(shlex.join(ARGV))


def test_a_clearing_or_reordering_argument_cannot_wipe_what_pending_lists(env, tmp_path):
    first = ["rm", "-rf", "src"]
    wiper = ["rm", "-rf", "\x1b[H\x1b[2J", "safe\u202etxt.exe"]
    held(first, env, tmp_path)
    held(wiper, env, tmp_path)
    out = at_terminal(["pending"], env, tmp_path)
    assert "\u202e".encode() not in out
    lines = screen(out)
    assert "  run:    rm -rf src" in lines
    assert "  run:    rm -rf $'\\x1b''[H'$'\\x1b''[2J' safe$'\\u202e'txt.exe" in lines
    control = screen(raw(out, wiper))  # raw: the screen is wiped after the first step
    assert "  run:    rm -rf src" not in control
    assert "\u202e".encode() in raw(out, wiper)


NAME = "report\u202egnp.exe\x1b[2K"
"""A file name that reads as ``reportexe.png`` when printed raw (and clears its line)."""
NAME_SHOWN = "report$'\\u202e'gnp.exe$'\\x1b''[2K'"


def test_file_list_shows_names_as_shell_words(env, tmp_path):
    (tmp_path / NAME).write_text("x")
    out = at_terminal(["file", "list", "."], env, tmp_path)
    assert "\u202e".encode() not in out and b"\x1b" not in out
    [line] = [line for line in screen(out) if line]
    assert line.startswith("file") and line.endswith(f"  {NAME_SHOWN}")
    control = out.replace(NAME_SHOWN.encode(), NAME.encode())
    assert "\u202e".encode() in control and not any(screen(control))  # cleared raw


def test_show_escapes_output_at_a_terminal_and_keeps_it_exact_when_piped(env, tmp_path):
    printed = "PWNED: rm -rf ~\r\x1b[2Kall good\n"
    ran = cli(["run", "--mode", FULL, "--", "printf", "%s", printed], env, tmp_path)
    assert ran.returncode == 0, ran.stderr
    [step] = json.loads(cli(["log", "--json"], env, tmp_path).stdout)
    run = step["run_id"]
    out = at_terminal(["show", run, "1"], env, tmp_path)
    assert "PWNED: rm -rf ~\\r\\x1b[2Kall good" in screen(out)
    piped = cli(["show", run, "1"], env, tmp_path).stdout
    assert piped == printed.encode()  # exact when not at a terminal
    control = screen(piped.replace(b"\n", b"\r\n"))
    assert "all good" in control and not any("PWNED" in line for line in control)


# --- MCP elicitation ----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_the_mcp_elicitation_message_shows_rm_and_its_escapes(tmp_path):
    from mcp import ClientSession, StdioServerParameters, stdio_client, types

    ws = tmp_path / "ws"
    ws.mkdir()
    config = tmp_path / "stockade.toml"
    config.write_text(f'[agents.careful]\nworkspace = "{ws}"\n', encoding="utf-8")
    (ws / NAME).write_text("x")
    asked: list[str] = []

    async def decline(_context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="decline")

    server = StdioServerParameters(
        command=STOCKADE[0],
        args=[*STOCKADE[1:], "--config", str(config), "mcp", "--agent", "careful"],
        env={"XDG_STATE_HOME": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"},
        cwd=str(tmp_path),
    )
    with (tmp_path / "server.err").open("a") as errlog:
        async with (
            stdio_client(server, errlog=errlog) as (read, write),
            ClientSession(read, write, elicitation_callback=decline) as session,
        ):
            await session.initialize()
            result = await session.call_tool("run_command", {"argv": ARGV})
            listing = await session.call_tool("file_list", {"path": "."})
    assert result.is_error
    [names] = [part.text for part in listing.content if isinstance(part, types.TextContent)]
    assert names.endswith(f"  {NAME_SHOWN}") and "\u202e" not in names
    assert listing.structured_content["entries"][0]["name"] == NAME  # exact for programs
    [question] = asked
    assert f"  run:    {SHOWN}" in question.splitlines()
    assert not any(hidden(char) for char in question.replace("\n", ""))
    as_printed = question.replace("\n", "\r\n").encode()  # a terminal client prints it
    assert_rm_is_seen(screen(as_printed))
    assert_rm_is_hidden(screen(raw(as_printed, ARGV)))


def test_a_long_command_is_named_again_where_the_question_is(env, tmp_path):
    argv = ["rm", "-rf", "/important", *["--verbose"] * 600]
    out = at_terminal(["run", "--mode", FULL, "--", *argv], env, tmp_path, answer=b"n\n")
    bottom = screen(out, columns=80, rows=24)  # what a person sees when the question comes
    assert not any(line.startswith("  run:") for line in bottom)  # the head scrolled away
    size = len(command(argv))
    note = f"  long:   rm with 602 arguments, {size} characters: read the whole run: line above"
    assert note in bottom


def test_an_error_message_quoting_hostile_text_is_printed_escaped(capsys):
    from stockade.cli.common import report_error
    from stockade.errors import UsageError

    report_error(UsageError("no such step: x\x1b[2Jy\u202e", hint="try \r again"), as_json=False)
    err = capsys.readouterr().err
    assert "x\\x1b[2Jy\\u202e" in err and "try \\r again" in err
    assert "\x1b" not in err and "\u202e" not in err and "\r" not in err
    report_error(UsageError("x\x1b"), as_json=True)  # JSON: exact, JSON-escaped
    assert json.loads(capsys.readouterr().out)["error"]["message"] == "x\x1b"
