"""network.md tells the truth: its host rules parse as it says, and it quotes the proxy's
refusal."""

from __future__ import annotations

import re

import pytest

from helpers.docs import DOCS, section

# --- the network page -----------------------------------------------------------------------

NETWORK_PAGE = DOCS / "network.md"


def test_the_network_page_rules_parse_as_it_says():
    from stockade.egress.proxy import decide, parse_hosts
    from stockade.errors import ConfigError

    table = section(NETWORK_PAGE, "## Host rules")
    entries = [
        e for row in re.findall(r"^\| (.+?) \|", table, re.M) for e in re.findall(r"`([^`]+)`", row)
    ]
    assert entries == [
        "github.com",
        "pypi.org:8443",
        "*.example.com",
        "127.0.0.1:8080",
        "[::1]:80",
        "localhost:5432",
    ]
    rules = parse_hosts(entries)
    assert decide(rules, "github.com", 443)[0] and not decide(rules, "github.com", 80)[0]
    assert decide(rules, "a.example.com", 443)[0] and not decide(rules, "example.com", 443)[0]
    for bad in ("*", "com", "*.io", ""):
        with pytest.raises(ConfigError):
            parse_hosts([bad])


def test_the_network_page_quotes_the_refusal():
    from stockade.egress.proxy import decide, parse_hosts

    allowed, reason = decide(parse_hosts(["github.com"]), "evil.com", 443)
    assert not allowed
    assert f"stockade egress proxy: {reason.split(' (')[0]}" in NETWORK_PAGE.read_text().replace(
        "\n  ", " "
    )
