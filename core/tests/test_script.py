"""Shell scripts read by their parts: the table in docs, properties, and bash as the referee."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from stockade.policy.classifier import classify_argv, programs_run, script_parts
from stockade.policy.script import STEERING, Context, Script, Unread, read
from stockade.policy.script._words import literal
from stockade.request.literals import KINDS

sys.path.insert(0, str(Path(__file__).parent))
from test_classify import TABLE as ARGV_TABLE  # the argv table: the parts' source

ROOT = Path(__file__).resolve().parents[2]
TABLE_FILE = ROOT / "docs" / "examples" / "scripts.txt"
CONTEXT = Context("/w", ("/w", "/tmp"), path="/usr/bin:/bin")
SHELLS = (("bash", "-c"), ("sh", "-c"), ("dash", "-c"), ("bash", "-lc"))


def _table() -> list[tuple[str, str]]:
    rows = []
    for line in TABLE_FILE.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        kind, script = line[:10].strip(), line[10:]
        rows.append((kind, script.replace("⏎", "\n")))
    return rows


TABLE = _table()


def _class(script: str, shell: tuple[str, str] = ("bash", "-c")) -> str:
    return classify_argv([*shell, script], path=CONTEXT.path, context=CONTEXT)[0]


def _severity(kind: str) -> int:
    return KINDS.index(kind)


def test_the_table_is_large_and_covers_every_class():
    assert len(TABLE) >= 200
    assert {kind for kind, _ in TABLE} == set(KINDS)


@pytest.mark.parametrize(("kind", "script"), TABLE, ids=[s for _, s in TABLE])
def test_each_script_gets_its_class(kind, script):
    for shell in SHELLS:
        got, why = classify_argv([*shell, script], path=CONTEXT.path, context=CONTEXT)
        assert got == kind, (shell, script, why)
        assert why


def test_the_reason_names_the_strongest_part():
    why = classify_argv(["bash", "-c", "ls && rm -rf build; pwd"], context=CONTEXT)[1]
    assert "part 2, rm -rf build: rm is listed as destroys" in why


def test_a_target_that_cannot_be_resolved_counts_as_outside(monkeypatch):
    from stockade import resolved

    assert _class("echo x > out.txt") == "writes"  # the control: inside the root

    def swapped(path):  # a link swapped back and forth that wins every try
        raise NotADirectoryError(20, "Not a directory", path)

    monkeypatch.setattr(resolved, "realpath", swapped)
    got, why = classify_argv(["sh", "-c", "echo x > out.txt"], context=CONTEXT)
    assert got == "destroys" and "cannot be resolved: Not a directory" in why, why


def test_an_unread_script_says_what_and_where():
    why = classify_argv(["sh", "-c", "ls; echo $(id)"], context=CONTEXT)[1]
    assert "a command substitution at line 1, column 10" in why


def test_the_programs_of_every_part_are_named():
    argv = ["bash", "-lc", "cd src && git status | head -n 3; env rm x"]
    assert programs_run(argv) == ("bash", "git", "head", "env", "rm")
    assert next(p.argv for p in script_parts(argv)) == ("cd", "src")


def test_the_environment_can_make_a_script_unread():
    for name in ("BASH_ENV", "ENV", "BASH_FUNC_ls%%", "SHELLOPTS", "PS4", "LD_PRELOAD"):
        context = Context("/w", ("/w",), (name,))
        assert classify_argv(["bash", "-c", "ls"], context=context)[0] == "destroys", name
    for prefix in (["env", "BASH_ENV=/w/x"], ["env", "PATH=/w"], ["env", "BASH_FUNC_ls%%=() {}"]):
        assert classify_argv([*prefix, "bash", "-c", "ls"], context=CONTEXT)[0] == "destroys"


def test_options_the_reader_does_not_know_leave_it_destroys():
    for options in (["-i"], ["-O", "expand_aliases"], ["+e"], ["-s"], ["--rcfile", "x"]):
        assert classify_argv(["bash", *options, "-c", "ls"], context=CONTEXT)[0] == "destroys"
    assert (
        classify_argv(["bash", "-e", "-o", "pipefail", "-c", "ls"], context=CONTEXT)[0] == "reads"
    )


def test_scripts_nest_only_so_deep():
    script = "ls"
    for _ in range(6):
        script = shlex.join(["bash", "-c", script])
    assert _class(script) == "destroys"


def test_without_a_context_a_written_file_is_outside_every_root():
    assert classify_argv(["sh", "-c", "ls > out"])[0] == "destroys"
    assert classify_argv(["sh", "-c", "ls > /dev/null"])[0] == "reads"


def test_text_past_ascii_is_read_as_word_characters():
    # tree-sitter-bash's scanner has crashed on some of these: the grammar never sees them.
    crash = bytes.fromhex("f3b99385c2a67bf3a0829ec3a7c29a").decode()
    for _ in range(200):
        assert isinstance(read(crash), Unread)  # its `{` would expand; and it did not crash
    assert _class("git commit -m 'café ☕'") == "writes"
    assert _class("echo naïve") == "reads"


def test_a_symlink_out_of_the_roots_is_outside(tmp_path):
    (tmp_path / "out").symlink_to("/etc/passwd")
    context = Context(str(tmp_path), (str(tmp_path),))
    assert classify_argv(["sh", "-c", "echo x > out"], context=context)[0] == "destroys"
    assert classify_argv(["sh", "-c", "echo x > new"], context=context)[0] == "writes"


# --- properties -----------------------------------------------------------------------------

_parts = st.sampled_from([shlex.split(command) for _, command in ARGV_TABLE])
_joiners = st.sampled_from([";", "&&", "||", "|", "\n"])


@st.composite
def _scripts(draw):
    parts = draw(st.lists(_parts, min_size=1, max_size=6))
    text = shlex.join(parts[0])
    for part in parts[1:]:
        text += f" {draw(_joiners)} {shlex.join(part)}"
    return parts, text


@settings(max_examples=150, deadline=None)
@given(_scripts())
def test_a_script_is_never_weaker_than_any_part(drawn):
    parts, text = drawn
    kind = _class(text)
    for part in parts:
        assert _severity(kind) >= _severity(classify_argv(part, path=CONTEXT.path)[0]), (text, part)
    script = read(text)
    if isinstance(script, Script):  # else the grammar joined or split words bash would not
        assert [p.argv for p in script.parts] == [tuple(p) for p in parts]


_UNREAD = st.sampled_from(
    [
        "$x",
        '"$x"',
        "${x}",
        "$(id)",
        "`id`",
        "$((1))",
        "<(ls)",
        "*",
        "x?",
        "[ab]",
        "~",
        "{a,b}",
        "$'x'",
        "&",
    ]
)
_UNREAD_PARTS = st.sampled_from(
    ["f() { ls; }", "eval ls", "X=1 ls", "(ls)", "{ ls; }", "ls &", "source x", "trap ls EXIT"]
)


@settings(max_examples=150, deadline=None)
@given(_scripts(), _UNREAD, _UNREAD_PARTS, st.data())
def test_a_script_not_fully_understood_is_destroys(drawn, word, part, data):
    parts, _ = drawn
    where = data.draw(st.integers(0, len(parts) - 1))
    words = [shlex.quote(w) for w in parts[where]]
    words.insert(data.draw(st.integers(1, len(words))), word)
    texts = [shlex.join(p) for p in parts]
    with_word = " ; ".join([*texts[:where], " ".join(words), *texts[where + 1 :]])
    with_part = " ; ".join([*texts[:where], part, *texts[where:]])
    for text in (with_word, with_part):
        assert _class(text) == "destroys", text
        assert isinstance(read(text), Unread) or "destroys" in _class(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=80))
def test_arbitrary_text_is_read_or_destroys(text):
    script = read(text)
    kind = _class(text)
    if isinstance(script, Unread):
        assert kind == "destroys" and script.reason
        return
    for part in script.parts:
        if part.argv[0] in STEERING:  # `cd`, `:`, `set`, `exit`: the shell's, not programs
            continue
        assert _severity(kind) >= _severity(classify_argv(part.argv, path=CONTEXT.path)[0])


# --- bash and dash as the referee -----------------------------------------------------------

_SHELLS_HERE = [shell for shell in ("bash", "dash") if shutil.which(shell)]
_chars = st.characters(codec="utf-8", exclude_characters="\0\r\x1e\x1f")
_piece = st.one_of(
    st.text(_chars, min_size=1, max_size=6).map(shlex.quote),
    st.text(_chars, min_size=1, max_size=6).map(
        lambda s: '"' + "".join("\\" + c if c in '"\\$`' else c for c in s) + '"'
    ),
    st.text(_chars, min_size=1, max_size=6).map(
        lambda s: "".join("\\" + c if not c.isalnum() else c for c in s if c != "\n")
    ),
    st.text(st.sampled_from("abc-_./=:,@%+^#!~*?[]{}$"), min_size=1, max_size=4),
)
_shell_word = st.lists(_piece, min_size=1, max_size=3).map("".join)
# One printf per record (one write), so the parts of a pipeline cannot interleave.
_RECORDER = "exec 3>&1\nrec() { printf '%s\\036' \"$@\" \"$(printf '\\037')\" >&3; }\n"


def _argvs(out: bytes) -> list[tuple[str, ...]]:
    records = out.decode("utf-8", "surrogateescape").split("\x1f\x1e")[:-1]
    return sorted(tuple(r.split("\x1e")[:-1]) for r in records)


@pytest.mark.skipif(not _SHELLS_HERE, reason="no bash or dash on this machine")
@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_shell_word, max_size=4), min_size=1, max_size=4), _joiners)
def test_a_read_script_runs_the_argvs_the_reader_read(parts, joiner):
    """Every script the reader reads, bash and dash run with exactly the argvs it read."""
    text = f" {joiner} ".join(" ".join(["rec", *words]) for words in parts)
    # With ||, each recorded part fails, so the next one runs too.
    recorder = _RECORDER.replace("; }", "; return 1; }") if joiner == "||" else _RECORDER
    script = read(text)
    assume(isinstance(script, Script))
    assert isinstance(script, Script)
    expected = sorted(p.argv[1:] for p in script.parts)
    for shell in _SHELLS_HERE:
        ran = subprocess.run(
            [shell, "-c", recorder + text],
            capture_output=True,
            timeout=10,
            check=False,
            env={"PATH": os.defpath, "LC_ALL": "C.UTF-8"},
        )
        assert _argvs(ran.stdout) == expected, (shell, text, ran.stderr)


@pytest.mark.skipif(not _SHELLS_HERE, reason="no bash or dash on this machine")
@settings(max_examples=100, deadline=None)
@given(_shell_word)
def test_a_literal_word_has_the_value_the_shells_give_it(word):
    value = literal(word)
    assume(value is not None)
    for shell in _SHELLS_HERE:
        ran = subprocess.run(
            [shell, "-c", f"printf '%s\\036' {word}"],
            capture_output=True,
            timeout=10,
            check=False,
            env={"PATH": os.defpath, "LC_ALL": "C.UTF-8"},
        )
        assert ran.stdout.decode("utf-8", "surrogateescape") == value + "\x1e", (shell, word)


# --- what a person is shown -----------------------------------------------------------------


def test_the_prompt_shows_the_parts_as_a_person_reads_them(make_host, tmp_path):
    from stockade.errors import PolicyHeld
    from stockade.policy.prompt import describe
    from stockade.request.result import PendingApproval
    from stockade.request.spec import ExecRequest

    host = make_host()
    script = "cd src && grep -rn 'TODO: x' . | head -n 3 > todo.txt 2>&1\nrm -f 'old log'"
    (tmp_path / "src").mkdir()
    with pytest.raises(PolicyHeld) as held:
        host.run(ExecRequest(["bash", "-lc", script], str(tmp_path)))
    [step] = host.store.waiting()
    assert step.classification.parts == (
        "cd src",
        "&& grep -rn 'TODO: x' .",
        "| head -n 3 >todo.txt 2>&1",
        "; rm -f 'old log'",
    )
    text = describe(PendingApproval(step.spec, step.classification, step.decision))
    assert "  script: cd src\n          && grep -rn 'TODO: x' .\n" in text
    assert "          ; rm -f 'old log'\n  class:  destroys\n" in text
    assert held.value.details["kind"] == "destroys"


def test_a_part_cannot_rewrite_the_prompt(make_host, tmp_path):
    from stockade.errors import PolicyHeld
    from stockade.request.spec import ExecRequest

    host = make_host()
    with pytest.raises(PolicyHeld):
        host.run(ExecRequest(["sh", "-c", "rm -f 'x\x1b[2K\b  run:    ls'"], str(tmp_path)))
    [step] = host.store.waiting()
    assert step.classification.parts == ("rm -f x$'\\x1b''[2K'$'\\x08''  run:    ls'",)


def test_tree_sitter_loads_only_for_a_shell(tmp_path):
    code = (
        "import sys\n"
        "from stockade.policy.classifier import classify_argv\n"
        "classify_argv(['ls', '-la']); classify_argv(['env', 'git', 'status'])\n"
        "assert 'tree_sitter' not in sys.modules\n"
        "classify_argv(['sh', '-c', 'ls'])\n"
        "assert 'tree_sitter' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, timeout=60)
