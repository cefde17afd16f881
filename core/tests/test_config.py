"""Config loading: defaults, discovery, and readable errors with the path of the bad key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stockade.config.load import config_path, load_config, parse_config
from stockade.config.schema import Config
from stockade.errors import ConfigError


def test_no_file_means_embedded_defaults(tmp_path):
    config = load_config(environ={"HOME": str(tmp_path)})
    assert config == Config()
    assert (config.executor, config.sandbox, config.mode) == ("local", "auto", "workspace-write")
    assert (config.timeout.default, config.timeout.max) == (30.0, 600.0)
    assert config.output.limit == 1024 * 1024


def test_xdg_file_is_found_and_cwd_file_is_not(tmp_path, monkeypatch):
    (tmp_path / "stockade.toml").write_text('mode = "danger-full-access"\n')
    monkeypatch.chdir(tmp_path)
    assert config_path({"HOME": str(tmp_path)}) is None
    xdg = tmp_path / "xdg" / "stockade"
    xdg.mkdir(parents=True)
    (xdg / "config.toml").write_text('mode = "read-only"\n[timeout]\ndefault = 5\n')
    config = load_config(environ={"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert config.mode == "read-only"
    assert config.timeout.default == 5.0
    assert config.source == str(xdg / "config.toml")


def test_stockade_config_env_wins_and_must_exist(tmp_path):
    with pytest.raises(ConfigError, match=r"cannot read config file .*missing\.toml"):
        load_config(environ={"STOCKADE_CONFIG": str(tmp_path / "missing.toml")})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("timout = 3", "unknown key 'timout' @ $"),
        ("[timeout]\ndefualt = 3", "unknown key 'defualt' @ $.timeout"),
        ('mode = "rw"', "invalid value 'rw': must be one of"),
        ('[timeout]\ndefault = "30"', "expected a number, got str '30' @ $.timeout.default"),
        ("executor = 3", "expected str, got int 3 @ $.executor"),
        ("[plugins]\ndisable = [1]", "@ $.plugins.disable[0]"),
        ("[timeout]\ndefault = 900", "default (900.0) is above max (600.0) @ $.timeout"),
        ("[output]\nlimit = 0", "limit must be greater than 0"),
        ('source = "x"', "unknown key 'source' @ $"),
        ("x = ", "is not valid TOML"),
    ],
)
def test_bad_config_names_the_key(text, message):
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="test.toml")
    assert message in caught.value.message
    assert "test.toml" in caught.value.message
    assert caught.value.exit_status == 125


def test_every_problem_is_listed_at_once():
    with pytest.raises(ConfigError) as caught:
        parse_config('timout = 1\nmode = "x"\n[env]\nallow = "PATH"')
    problems = caught.value.details["problems"]
    assert len(problems) == 3, problems


@given(st.dictionaries(st.text(min_size=1, max_size=8), st.integers() | st.text(max_size=5)))
def test_arbitrary_tables_never_crash(data):
    from stockade.config.load import structure_config

    try:
        structure_config(data, source="fuzz")
    except ConfigError as error:
        assert error.details["problems"]


def test_relative_paths_inside_a_file_are_its_folders(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "c.toml").write_text(
        '[store]\npath = "db/store.db"\n[credentials]\nfile = "../secrets.toml"\n'
        '[output]\nspill_dir = "spill"\n[network]\nupstream_ca = "/abs/ca.pem"\n'
        '[skills]\nuser = ["skills", "~/mine"]\n'
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the reading process's folder counts for nothing inside
    for config in (
        load_config("../conf/c.toml", environ={}),
        load_config("conf/c.toml", environ={}, cwd=str(tmp_path)),  # a server's caller
    ):
        assert config.store.path == str(folder / "db" / "store.db")
        assert config.credentials.file == str(tmp_path / "secrets.toml")
        assert config.output.spill_dir == str(folder / "spill")
        assert config.network.upstream_ca == "/abs/ca.pem"
        assert config.skills.user == (str(folder / "skills"), "~/mine")
        assert config.source in ("../conf/c.toml", "conf/c.toml")  # named as given


def test_a_config_without_paths_keeps_its_defaults(tmp_path) -> None:
    (tmp_path / "c.toml").write_text("[timeout]\ndefault = 5\n")
    config = load_config(str(tmp_path / "c.toml"), environ={})
    assert (config.store.path, config.credentials.file, config.skills.user) == (None, None, None)
