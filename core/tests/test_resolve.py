"""The resolve stage: the child environment and program lookup, attacked with generated input."""

from __future__ import annotations

import os
import stat

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stockade.errors import ProgramNotFound, UsageError
from stockade.policy.resolve import FIXED_ENV, child_env, find_program, is_secret_name

names = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="="),
    min_size=1,
    max_size=24,
)
secretish = st.builds(
    lambda pre, word, post: pre + word + post,
    st.text("ABCxyz_", max_size=6),
    st.sampled_from(["KEY", "key", "Secret", "TOKEN", "token", "PASSWORD", "passwd", "Credential"]),
    st.text("ABCxyz_", max_size=6),
)


@given(st.dictionaries(names | secretish, st.text(max_size=8)), st.lists(names | secretish))
def test_no_secret_looking_ambient_name_ever_passes(ambient, extra_allow):
    env = child_env(ambient, {}, extra_allow)
    for name in env:
        if name in FIXED_ENV:
            continue
        assert not is_secret_name(name), name
        assert name in ambient or name == "PATH"
        assert name in {"PATH", "HOME", "LANG", "TZ", *extra_allow} or name.startswith("LC_")


@given(secretish, st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=8))
def test_an_explicit_entry_wins_even_with_a_secret_name(name, value):
    if not name.replace("_", "a").isalnum() or name[0].isdigit():
        return
    env = child_env({name: "ambient"}, {name: value})
    assert env[name] == value


def test_fixed_entries_override_ambient_and_explicit_overrides_fixed():
    env = child_env({"TERM": "xterm-256color", "PAGER": "less", "LC_ALL": "C.UTF-8"}, {"CI": "0"})
    assert env["TERM"] == "dumb" and env["PAGER"] == "cat" and env["CI"] == "0"
    assert env["LC_ALL"] == "C.UTF-8"


@pytest.mark.parametrize("bad", ["A=B", "1X", "", "A B", "ÄX"])
def test_invalid_explicit_names_are_refused(bad):
    with pytest.raises(UsageError, match="invalid environment variable name"):
        child_env({}, {bad: "x"})


def test_program_lookup_follows_path_order_and_skips_non_executables(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (first / "tool").write_text("#!/bin/sh\n")  # not executable: skipped
    (first / "dir-tool").mkdir()
    target = second / "tool"
    target.write_text("#!/bin/sh\n")
    target.chmod(stat.S_IRWXU)
    assert find_program("tool", f"{first}:{second}", "/") == str(target)
    with pytest.raises(ProgramNotFound) as caught:
        find_program("dir-tool", str(first), "/")
    assert caught.value.details["searched"] == str(first)
    assert caught.value.exit_status == 127


def test_relative_paths_resolve_against_the_cwd_not_path(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(stat.S_IRWXU)
    assert find_program("./run.sh", "/usr/bin", str(tmp_path)) == str(script)
    with pytest.raises(ProgramNotFound, match="no executable file at"):
        find_program("./run.sh", "/usr/bin", os.path.dirname(tmp_path))
