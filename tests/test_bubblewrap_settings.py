"""The bubblewrap provider's settings: exact types, absolute paths, every problem named."""

from __future__ import annotations

import os

import pytest
from stockade_bubblewrap.settings import Settings

from stockade.config.schema import Config, PluginsConfig
from stockade.errors import ConfigError
from stockade.request.spec import ExecRequest


def test_defaults():
    settings = Settings.parse({})
    assert settings == Settings()
    assert settings.unix_sockets is False
    assert settings.seccomp_cache is None


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"unix_sockets": "false"}, "unix_sockets: must be true or false, got 'false'"),
        ({"unix_sockets": 0}, "unix_sockets: must be true or false, got 0"),
        ({"deny_read": "/etc"}, "deny_read: must be a list of absolute paths, got '/etc'"),
        ({"writable_roots": ["relative/dir"]}, "writable_roots[0]: must be absolute"),
        ({"writable_roots": [""]}, "writable_roots[0]: must be a path, got ''"),
        ({"deny_read": ["/ok", 7]}, "deny_read[1]: must be a path, got 7"),
        ({"scan_limit": 0}, "scan_limit: must be a whole number >= 1, got 0"),
        ({"scan_limit": True}, "scan_limit: must be a whole number >= 1, got True"),
        ({"scan_limit": "100"}, "scan_limit: must be a whole number >= 1, got '100'"),
        ({"seccomp_cache": "cache"}, "seccomp_cache: must be absolute"),
        ({"unix_socket": True}, "unix_socket: unknown setting (known: writable_roots, "),
    ],
)
def test_a_bad_value_is_a_config_error_naming_the_key(options, problem):
    with pytest.raises(ConfigError) as caught:
        Settings.parse(options)
    assert f"plugins.settings.bubblewrap.{problem}" in caught.value.message
    assert caught.value.exit_status == 125


def test_every_problem_is_named_at_once():
    with pytest.raises(ConfigError) as caught:
        Settings.parse({"unix_sockets": "yes", "scan_limit": -1, "deny_read": "x"})
    assert len(caught.value.details["problems"]) == 3


def test_paths_expand_home_and_writable_roots_resolve(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = Settings.parse(
        {"writable_roots": ["~/link"], "deny_read": ["~/secret/"], "seccomp_cache": ""}
    )
    assert settings.writable_roots == (str(real),)
    assert settings.deny_read == (os.path.join(str(tmp_path), "secret"),)
    assert settings.seccomp_cache == ""


def test_a_host_with_bad_settings_refuses_the_command_and_says_why(make_host, tmp_path):
    config = Config(
        sandbox="bubblewrap",
        plugins=PluginsConfig(settings={"bubblewrap": {"unix_sockets": "false"}}),
    )
    host = make_host(allow_all=True, config=config)
    with pytest.raises(ConfigError, match="unix_sockets: must be true or false"):
        host.run(ExecRequest(["true"], str(tmp_path), mode="workspace-write"))
