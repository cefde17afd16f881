"""Config git takes from the environment (``confine.gitconfig.environment``): the
``GIT_CONFIG_COUNT`` pairs and ``git -c``'s ``GIT_CONFIG_PARAMETERS``, read as git reads
them; anything malformed names nothing and never raises."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stockade.confine.gitconfig import environment


def test_the_count_pairs_and_the_parameters_are_read() -> None:
    found = environment({
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "Core.HooksPath",
        "GIT_CONFIG_VALUE_0": "hooks",
        "GIT_CONFIG_KEY_1": 'includeIf.gitdir:/x/.path',
        "GIT_CONFIG_VALUE_1": "/etc/extra",
        "GIT_CONFIG_PARAMETERS": "'core.hooksPath'='a b' 'user.name=it'\\''s'",
    })  # fmt: skip
    assert found == [
        ("core", "hookspath", "hooks"),
        ("includeif gitdir:/x/", "path", "/etc/extra"),
        ("core", "hookspath", "a b"),
        ("user", "name", "it's"),
    ]


def test_a_count_past_its_keys_or_not_a_number_names_nothing_more() -> None:
    assert environment({"GIT_CONFIG_COUNT": "5", "GIT_CONFIG_KEY_0": "core.hooksPath"}) == [
        ("core", "hookspath", "")
    ]
    assert environment({"GIT_CONFIG_COUNT": "x", "GIT_CONFIG_KEY_0": "core.hooksPath"}) == []
    assert environment({"GIT_CONFIG_PARAMETERS": "'unterminated"}) == []


@given(st.dictionaries(
    st.sampled_from(["GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0",
                     "GIT_CONFIG_KEY_1", "GIT_CONFIG_PARAMETERS"]),
    st.text(max_size=40),
))  # fmt: skip
def test_any_environment_reads_without_raising(environ: dict[str, str]) -> None:
    for section, key, value in environment(environ):
        assert section and key and isinstance(value, str)
        assert "." not in key
