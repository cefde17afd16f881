"""The egress proxy's host rules: what ``parse_hosts`` accepts and refuses, and what
``decide`` allows, with reasons that name the rules."""

import pytest

from stockade.egress.proxy import Rule, decide, parse_hosts
from stockade.errors import ConfigError

pytestmark = pytest.mark.usefixtures("_no_ambient_proxy")


# --- parse_hosts -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "rule"),
    [
        ("github.com", Rule("github.com", 443, False)),
        ("GitHub.COM", Rule("github.com", 443, False)),
        ("github.com.", Rule("github.com", 443, False)),
        ("pypi.org:8443", Rule("pypi.org", 8443, False)),
        ("*.example.com", Rule("example.com", 443, True)),
        ("*.Example.com:8080", Rule("example.com", 8080, True)),
        ("127.0.0.1:8080", Rule("127.0.0.1", 8080, False)),
        ("10.0.0.1", Rule("10.0.0.1", 443, False)),
        ("[::1]:80", Rule("::1", 80, False)),
        ("[::1]", Rule("::1", 443, False)),
        ("localhost:8000", Rule("localhost", 8000, False)),
        ("files.pythonhosted.org", Rule("files.pythonhosted.org", 443, False)),
        (" _acme.example.com ", Rule("_acme.example.com", 443, False)),
    ],
)
def test_parse_hosts_accepts(entry, rule):
    assert parse_hosts([entry]) == (rule,)


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("*", "allows everything"),
        ("*.com", "bare top-level domain"),
        ("*.io", "bare top-level domain"),
        ("com", "bare top-level domain"),
        ("*.localhost", "bare top-level domain"),
        ("", "empty"),
        ("   ", "empty"),
        ("github.com:0", "port"),
        ("github.com:65536", "port"),
        ("github.com:https", "port"),
        ("github.com:", "port"),
        ("foo.*.com", "wildcard"),
        ("*example.com", "wildcard"),
        ("example.*", "wildcard"),
        ("**.example.com", "wildcard"),
        ("https://github.com", "not a URL"),
        ("github.com/org/repo", "not a URL"),
        ("user@github.com", "not a URL"),
        ("::1", "brackets"),
        ("[github.com]:443", "IPv6"),
        ("[::1", "unclosed"),
        ("-bad.example.com", "valid host name"),
        ("exa..mple.com", "valid host name"),
        ("1.2.3", "valid host name"),
        ("bücher.de", "valid host name"),
    ],
)
def test_parse_hosts_refuses(entry, why):
    with pytest.raises(ConfigError) as info:
        parse_hosts(["github.com", entry])
    assert repr(entry) in info.value.message
    assert why in info.value.message


def test_parse_hosts_keeps_order_and_drops_duplicates():
    rules = parse_hosts(["b.example.com", "a.example.com", "B.example.com"])
    assert [r.host for r in rules] == ["b.example.com", "a.example.com"]


def test_parse_hosts_refuses_a_bare_string():
    with pytest.raises(ConfigError):
        parse_hosts("github.com")


# --- decide ------------------------------------------------------------------------------------

RULES = parse_hosts(["github.com", "*.example.com", "pypi.org:8443", "127.0.0.1:8080", "[::1]:80"])


@pytest.mark.parametrize(
    ("host", "port", "allowed"),
    [
        ("github.com", 443, True),
        ("GITHUB.com", 443, True),
        ("github.com.", 443, True),
        ("github.com", 80, False),
        ("api.github.com", 443, False),
        ("a.example.com", 443, True),
        ("a.b.Example.COM.", 443, True),
        ("example.com", 443, False),
        (".example.com", 443, False),
        ("badexample.com", 443, False),
        ("example.com.evil.net", 443, False),
        ("a.example.com", 8443, False),
        ("pypi.org", 8443, True),
        ("pypi.org", 443, False),
        ("127.0.0.1", 8080, True),
        ("127.0.0.1", 443, False),
        ("[::1]", 80, True),
        ("::1", 80, True),
        ("0:0::1", 80, True),
        ("evil.com", 443, False),
    ],
)
def test_decide(host, port, allowed):
    assert decide(RULES, host, port)[0] is allowed


def test_decide_reasons_name_the_rule():
    assert decide(RULES, "github.com", 443) == (True, "github.com:443 is in the profile's hosts")
    ok, why = decide(RULES, "a.example.com", 443)
    assert ok
    assert "*.example.com:443" in why
    ok, why = decide(RULES, "evil.com", 443)
    assert not ok
    assert why == (
        "evil.com:443 is not in the profile's hosts (github.com:443, *.example.com:443, "
        "pypi.org:8443, 127.0.0.1:8080, [::1]:80)"
    )
    assert decide((), "github.com", 443) == (
        False,
        "github.com:443 is not reachable: the profile names no hosts",
    )


def test_decide_lists_a_few_rules_only():
    many = parse_hosts([f"h{i}.example.com" for i in range(20)])
    why = decide(many, "x.org", 443)[1]
    assert "h7.example.com:443" in why
    assert "h8.example.com" not in why
    assert "and 12 more" in why
