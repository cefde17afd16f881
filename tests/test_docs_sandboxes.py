"""bubblewrap.md, seccomp.md and landlock.md tell the truth: every denied call, setting,
protected name and pinned gap has its row, and each page's configuration example (included
from this file) sets every setting and runs."""

from __future__ import annotations

import re

import attrs
import pytest
from stockade_bubblewrap import layout
from stockade_bubblewrap.settings import Settings
from stockade_landlock import provider as landlock_provider
from stockade_landlock.settings import Settings as LandlockSettings

from helpers.docs import DOCS, ROOT, section, table_keys
from stockade.config.load import parse_config
from stockade.confine import protected, seccomp, stores
from stockade.confine.provider import DENIAL_SIGNATURES
from stockade.request.plan import SandboxFacts
from stockade.request.spec import ExecRequest

# --- the bubblewrap and seccomp pages -----------------------------------------------------

BUBBLEWRAP_PAGE = DOCS / "bubblewrap.md"
SECCOMP_PAGE = DOCS / "seccomp.md"


def bubblewrap_settings() -> list[str]:
    """The settings the bubblewrap provider accepts: the fields of its ``Settings``."""
    names = [field.name for field in attrs.fields(Settings)]
    assert len(names) >= 5, f"found only {names} in stockade_bubblewrap.settings.Settings"
    return names


def test_the_seccomp_page_lists_every_denied_syscall_with_its_reason():
    body = section(SECCOMP_PAGE, "### Denied system calls")
    rows = dict(re.findall(r"^\| `([a-z0-9_]+)` \| (.+?) \|$", body, flags=re.M))
    missing = [name for name in seccomp.DENIED if name not in rows]
    assert not missing, f"docs/seccomp.md lacks rows for {missing}"
    assert rows == seccomp.DENIED


def test_the_seccomp_page_lists_every_sysv_call_with_its_reason():
    body = section(SECCOMP_PAGE, "### System V IPC")
    rows = dict(re.findall(r"^\| `([a-z0-9_]+)` \| (.+?) \|$", body, flags=re.M))
    assert rows == seccomp.SYSV_IPC


@pytest.mark.parametrize(
    "name",
    [
        *seccomp.DENIED,
        *(reason.split(":")[0] for reason in seccomp.DENIED_IOCTLS.values()),
        *(f"{request:#06X}".replace("0X", "0x") for request in seccomp.DENIED_IOCTLS),
        *seccomp.CLONE_NAMESPACE_FLAGS,
        *seccomp.PERSONA_FLAGS,
        "clone3",
        "AF_NETLINK",
        "AF_UNIX",
        "AF_INET",
        "AF_INET6",
    ],
)
def test_the_seccomp_page_names_each_part_of_the_policy(name):
    assert f"`{name}`" in SECCOMP_PAGE.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("page", "heading"),
    [(BUBBLEWRAP_PAGE, "## Settings"), (DOCS / "configuration.md", "## The bubblewrap sandbox")],
    ids=["bubblewrap.md", "configuration.md"],
)
def test_every_bubblewrap_setting_has_a_row(page, heading):
    assert sorted(table_keys(section(page, heading))) == sorted(bubblewrap_settings())


@pytest.mark.parametrize(
    "name",
    [
        *stores.CREDENTIAL_STORES,
        *sorted(protected.AGENT_CONFIG),
        *sorted(protected.DOTFILES),
        *protected.RUN_LATER,
        *layout.PRIVATE_DIRS,
        *DENIAL_SIGNATURES,
        "SSH_AUTH_SOCK",
        "DBUS_SESSION_BUS_ADDRESS",
        "DOCKER_HOST",
    ],
)
def test_the_bubblewrap_page_names_what_the_layout_protects(name):
    assert f"`{name}`" in BUBBLEWRAP_PAGE.read_text(encoding="utf-8")


def test_the_bubblewrap_page_states_the_default_scan_limit():
    row = next(
        r for r in section(BUBBLEWRAP_PAGE, "## Settings").splitlines() if "`scan_limit`" in r
    )
    assert f"`{protected.DEFAULT_SCAN_LIMIT}`" in row


# The example in docs/bubblewrap.md, included from between the markers.
BUBBLEWRAP_TOML = """
# --8<-- [start:bubblewrap-toml]
[plugins.settings.bubblewrap]
writable_roots = ["/var/tmp/ccache"] # also writable in workspace-write, when it exists
deny_read = ["/etc/ssl/private"]    # also masked, in every mode
scan_limit = 50000                  # a large monorepo: walk up to 50,000 directories
seccomp_cache = ""                  # no disk cache: compile once per process (~22 ms)
unix_sockets = false                # socket(AF_UNIX) stays refused (the default)
layers = true                       # writes land through the host's checks (the default)
# --8<-- [end:bubblewrap-toml]
"""


def test_the_bubblewrap_config_example_sets_every_setting_and_runs(make_host, tmp_path):
    config = parse_config(BUBBLEWRAP_TOML)
    assert sorted(config.plugins.settings["bubblewrap"]) == sorted(bubblewrap_settings())
    host = make_host(allow_all=True, config=attrs.evolve(config, sandbox="bubblewrap"))
    result = host.run(ExecRequest(["touch", "made"], str(tmp_path), mode="workspace-write"))
    assert result.ok
    assert result.sandbox == SandboxFacts(
        "bubblewrap", "workspace-write", enforcement="full", writes="layered"
    )
    assert (tmp_path / "made").exists()


# --- the Landlock page --------------------------------------------------------------------

LANDLOCK_PAGE = DOCS / "landlock.md"


SECURITY_TESTS = ROOT / "tests" / "security"
# @pytest.mark.gap("landlock", "why"), then any other decorators, then the test it pins.
GAP_MARKER = re.compile(
    r"""@pytest\.mark\.gap\(\s*"landlock"\s*,\s*"((?:[^"\\]|\\.)*)"\s*\)\s*\n"""
    r"(?:\s*@.*\n)*\s*def (test_\w+)"
)


def landlock_settings() -> list[str]:
    """The settings the Landlock provider accepts: the fields of its ``Settings``."""
    names = [field.name for field in attrs.fields(LandlockSettings)]
    assert len(names) >= 7, f"found only {names} in stockade_landlock.settings.Settings"
    return names


def landlock_gaps() -> dict[str, str]:
    """Every gap pinned for Landlock in tests/security/test_*.py: ``file.py::test`` -> why."""
    gaps: dict[str, str] = {}
    for path in sorted(SECURITY_TESTS.glob("test_*.py")):
        source = path.read_text(encoding="utf-8")
        for reason, test in GAP_MARKER.findall(source):
            gaps[f"{path.name}::{test}"] = reason
        # A marker the pattern missed (odd quoting, a reason built at run time) must not
        # slip past unnoticed.
        markers = len(re.findall(r"mark\.gap\(\s*\"landlock\"", source))
        assert markers == sum(1 for k in gaps if k.startswith(f"{path.name}::")), path.name
    assert gaps, "no gap markers found in tests/security: has the marker been renamed?"
    return gaps


@pytest.mark.parametrize(
    ("page", "heading"),
    [(LANDLOCK_PAGE, "## Settings"), (DOCS / "configuration.md", "## The landlock sandbox")],
    ids=["landlock.md", "configuration.md"],
)
def test_every_landlock_setting_has_a_row(page, heading):
    assert sorted(table_keys(section(page, heading))) == sorted(landlock_settings())


def test_the_landlock_page_states_the_default_scan_limit():
    row = next(r for r in section(LANDLOCK_PAGE, "## Settings").splitlines() if "`scan_limit`" in r)
    assert f"`{protected.DEFAULT_SCAN_LIMIT}`" in row


@pytest.mark.parametrize("entry", landlock_provider.missing_at(1))
def test_the_landlock_page_lists_each_missing_entry_verbatim(entry):
    assert f"`{entry}`" in section(LANDLOCK_PAGE, "## Partial enforcement")


def test_the_landlock_page_lists_exactly_the_pinned_gaps():
    body = section(LANDLOCK_PAGE, "## Known gaps")
    rows = dict(re.findall(r"^\| `([^`]+)` \| (.+?) \|$", body, flags=re.M))
    assert rows == landlock_gaps()


@pytest.mark.parametrize(
    "name",
    [
        *landlock_provider.PRIVATE_DIRS,
        *landlock_provider.DEVICES,
        "TMPDIR",
        "XDG_CACHE_HOME",
        "SSH_AUTH_SOCK",
        "DBUS_SESSION_BUS_ADDRESS",
        "DOCKER_HOST",
    ],
)
def test_the_landlock_page_names_what_it_masks_and_grants(name):
    assert f"`{name}`" in LANDLOCK_PAGE.read_text(encoding="utf-8")


def test_the_landlock_page_states_the_priority():
    text = LANDLOCK_PAGE.read_text(encoding="utf-8")
    assert f"`PRIORITY = {landlock_provider.LandlockSandbox.PRIORITY}`" in text


# The example in docs/landlock.md, included from between the markers.
LANDLOCK_TOML = """
# --8<-- [start:landlock-toml]
[plugins.settings.landlock]
writable_roots = ["/var/tmp/ccache"] # also writable in workspace-write, when it exists
deny_read = ["/etc/ssl/private"]    # also masked, in every mode
scan_limit = 50000                  # a large monorepo: walk up to 50,000 directories
seccomp_cache = ""                  # no disk cache: compile once per process
unix_sockets = false                # socket(AF_UNIX) stays refused (the default)
accept_partial = false              # refuse an ABI that cannot enforce everything (the default)
max_abi = 6                         # behave as on a kernel with ABI 6, the first that has it all
snapshot_limit_mb = 256             # a .git (less its objects) of up to 256 MiB is kept
supervise = true                    # protected paths read-only while a command runs (the default)
# --8<-- [end:landlock-toml]
"""


def test_the_landlock_config_example_sets_every_setting_and_runs(make_host, tmp_path):
    config = parse_config(LANDLOCK_TOML)
    options = config.plugins.settings["landlock"]
    assert sorted(options) == sorted(landlock_settings())
    assert LandlockSettings.parse(options).max_abi == 6
    probe = landlock_provider.LandlockSandbox.probe()
    if not probe.usable or "partial" in probe.detail:
        pytest.skip(f"Landlock cannot enforce everything here: {probe.detail}")
    host = make_host(allow_all=True, config=attrs.evolve(config, sandbox="landlock"))
    result = host.run(ExecRequest(["touch", "made"], str(tmp_path), mode="workspace-write"))
    assert result.ok
    expected = SandboxFacts(
        "landlock", "workspace-write", enforcement="full", protection="read-only"
    )
    assert result.sandbox == expected
    assert (tmp_path / "made").exists()
