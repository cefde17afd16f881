"""The kit's system-secret attacks (:mod:`stockade.conformance.suite.test_system_secrets`);
what Landlock's rules grant, seen in them (the kit asks the provider's ``hides``, this looks
at the rules themselves); the built-in list, its docs and its configuration key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.config.load import parse_config
from stockade.confine import protected, system_secrets
from stockade.conformance.suite.test_system_secrets import *  # noqa: F403
from stockade.errors import ConfigError

ROOT = os.geteuid() == 0


def _landlock_reads(host, box, mode, path):
    """Whether the Landlock rules of a run would let it read ``path``'s content."""
    from stockade_landlock import abi

    admitted = host.prepare(host.admit(box.py("pass", mode=mode)))
    try:
        rules = admitted.plan.restrict.__self__.rules
    finally:
        admitted.provider.release(admitted.plan)
    real = os.path.realpath(path)
    granted = 0
    for rule in rules:  # rights granted on a folder hold beneath it
        if protected.inside(real, [rule.path]):
            granted |= rule.access
    return bool(granted & abi.FS_READ_FILE)


@pytest.mark.sandboxes("landlock")
def test_landlock_rules_grant_no_read_of_a_secret(host, box, mode):
    assert not _landlock_reads(host, box, mode, "/etc/shadow")
    assert not _landlock_reads(host, box, mode, "/etc/ssl/private/x")
    assert _landlock_reads(host, box, mode, "/etc/passwd")  # the control
    if not ROOT:
        assert not _landlock_reads(host, box, "read-only", "/root/.bashrc")


@pytest.mark.sandboxes("landlock")
def test_landlock_rules_with_home_at_a_secret_grant_no_read_of_it(host, box, mode):
    from stockade_landlock import abi

    admitted = host.prepare(host.admit(box.py("pass", mode=mode, env={"HOME": "/etc/shadow"})))
    try:
        rules = admitted.plan.restrict.__self__.rules
    finally:
        admitted.provider.release(admitted.plan)
    granted = 0
    for rule in rules:
        if protected.inside("/etc/shadow", [rule.path]):
            granted |= rule.access
    assert not granted & abi.FS_READ_FILE


def test_root_home_is_masked_unless_a_home_in_use_is_or_lies_in_it():
    if not os.path.isdir("/root"):
        pytest.skip("no /root here")
    assert "/root" in system_secrets.system_secrets(["/home/someone"])
    assert "/root" not in system_secrets.system_secrets(["/root"])
    assert "/root" not in system_secrets.system_secrets(["/root/.local/state/stockade/homes/r1"])


def test_the_list_names_the_promised_secrets():
    import fnmatch

    for promised in ("/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/sudoers.d"):
        assert any(fnmatch.fnmatch(promised, p) for p in system_secrets.SYSTEM_SECRETS), promised
    for pattern in system_secrets.SYSTEM_SECRETS:
        assert os.path.isabs(pattern)
    # Host public keys stay readable: the key glob never matches a .pub.
    assert not any(
        fnmatch.fnmatch("/etc/ssh/ssh_host_ed25519_key.pub", p)
        for p in system_secrets.SYSTEM_SECRETS
    )
    assert any(
        fnmatch.fnmatch("/etc/ssh/ssh_host_ed25519_key", p) for p in system_secrets.SYSTEM_SECRETS
    )


@settings(max_examples=200, deadline=None, database=None)  # CI runs it as a user too
@given(
    st.lists(st.one_of(st.text(max_size=12), st.integers(), st.none()), max_size=4)
    | st.text(max_size=12)
)
def test_the_config_key_takes_a_list_of_absolute_paths_only(entries):
    from stockade.config.load import structure_config

    try:
        config = structure_config({"system_secrets": entries}, source="fuzz")
    except ConfigError as error:
        assert "system_secrets" in str(error)
        assert isinstance(entries, str) or any(
            not isinstance(e, str) or not e.startswith("/") for e in entries
        )
        return
    assert isinstance(entries, list) and config.system_secrets == tuple(entries)
    assert all(os.path.isabs(e) for e in config.system_secrets)


def test_a_bare_string_is_refused_with_the_key_named():
    with pytest.raises(ConfigError, match=r"system_secrets"):
        parse_config('system_secrets = "/etc/app.key"\n')


def test_the_docs_list_every_system_secret():
    root = Path(__file__).resolve().parents[2] / "docs"
    bubblewrap = (root / "bubblewrap.md").read_text(encoding="utf-8")
    section = bubblewrap.split("## System secrets", 1)[1].split("\n## ", 1)[0]
    for pattern in system_secrets.SYSTEM_SECRETS:
        assert f"`{pattern}`" in section, pattern
    assert "## System secrets" in (root / "landlock.md").read_text(encoding="utf-8")
    assert "| `system_secrets` |" in (root / "configuration.md").read_text(encoding="utf-8")
