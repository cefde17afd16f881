"""The egress proxy's host rules: which ``host:port`` a ``network`` command may reach.

A profile's ``hosts`` become :class:`Rule` values (:func:`parse_hosts`); :func:`decide` says
whether a name and port are allowed and why, in words an agent can act on; an address a name
resolves to is screened by :func:`forbidden` unless a rule names it. The proxy
(:mod:`stockade.egress.proxy`) applies them; the request parser (:mod:`stockade.egress.http`)
and the TLS peek (:mod:`stockade.egress.tls`) use :func:`normalize` and :func:`valid_name` so that a
name is the same name in a rule, a request target, a ``Host`` header and a TLS server name.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Sequence

from attrs import frozen

from ..errors import ConfigError

__all__ = ["Rule", "decide", "forbidden", "literal_ip", "normalize", "parse_hosts", "valid_name"]

DEFAULT_PORT = 443
HTTP_PORT = 80
SHOWN_RULES = 8  # how many rules a refusal lists

_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)\Z")
IP = ipaddress.IPv4Address | ipaddress.IPv6Address


@frozen
class Rule:
    """One allowed destination: a name (or a wildcard's suffix, or a literal IP) and a port."""

    host: str  # lower-case name, literal IP (IPv6 without brackets), or a wildcard's suffix
    port: int
    wildcard: bool  # "*.example.com": subdomains only, never example.com itself

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'*.' if self.wildcard else ''}{host}:{self.port}"


def literal_ip(host: str) -> IP | None:
    """``host`` as an IP address (IPv6 without brackets), or None for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def valid_name(name: str) -> bool:
    """Whether ``name`` (lower-case, no trailing dot) is a DNS name a rule could name."""
    if not name or len(name) > 253 or not name.isascii():
        return False
    labels = name.split(".")
    return all(_LABEL.match(label) for label in labels) and not labels[-1].isdigit()


def _parse_entry(entry: str) -> Rule:
    def refuse(why: str) -> ConfigError:
        return ConfigError(
            f"hosts entry {entry!r}: {why}",
            hint='write "name", "name:port", "*.domain.tld", "1.2.3.4:port" or "[::1]:port"',
            details={"entry": entry},
        )

    text = entry.strip().lower()
    if not text:
        raise refuse("it is empty")
    if "://" in text or any(c in text for c in "/?#@ \t"):
        raise refuse("a host entry is a name and an optional port, not a URL or a path")
    if text.startswith("["):
        return _parse_bracketed(text, refuse)
    port = DEFAULT_PORT
    if text.count(":") > 1:
        raise refuse("an IPv6 address needs brackets, as in [::1]:443")
    if ":" in text:
        text, port_text = text.split(":")
        port = _parse_port(port_text, refuse)
    text = text.removesuffix(".")
    ip = literal_ip(text)
    if ip is not None:
        return Rule(str(ip), port, False)
    wildcard = text.startswith("*.")
    name = text[2:] if wildcard else text
    if text == "*" or "*" in name:
        raise refuse(
            "'*' allows everything; a wildcard is only '*.' before a domain"
            if text == "*"
            else "a wildcard may only be '*.' at the very start"
        )
    if not valid_name(name):
        raise refuse("not a valid host name or IP address")
    if "." not in name and not (name == "localhost" and not wildcard):
        raise refuse(f"{name!r} is a bare top-level domain; name a domain under it")
    return Rule(name, port, wildcard)


def _parse_bracketed(text: str, refuse: Callable[[str], ConfigError]) -> Rule:
    close = text.find("]")
    if close < 0:
        raise refuse("an unclosed '['")
    host, rest = text[1:close], text[close + 1 :]
    port = DEFAULT_PORT
    if rest:
        if not rest.startswith(":"):
            raise refuse("only ':port' may follow ']'")
        port = _parse_port(rest[1:], refuse)
    ip = literal_ip(host)
    if not isinstance(ip, ipaddress.IPv6Address):
        raise refuse("brackets hold an IPv6 address")
    return Rule(str(ip), port, False)


def _parse_port(text: str, refuse: Callable[[str], ConfigError]) -> int:
    if not text.isdigit() or not text.isascii() or not 0 < int(text) < 65536:
        raise refuse(f"port {text!r} is not a number from 1 to 65535")
    return int(text)


def parse_hosts(hosts: Sequence[str]) -> tuple[Rule, ...]:
    """Parse a profile's ``hosts`` into rules; refuse anything too broad or malformed.

    ``"github.com"`` means port 443; ``"pypi.org:8443"``, ``"127.0.0.1:8080"`` and
    ``"[::1]:80"`` name a port; ``"*.example.com"`` matches subdomains only. ``"*"``, bare
    top-level domains (``"com"``, ``"*.io"``), empty entries, bad ports, wildcards anywhere
    but the start, and URLs or paths raise :class:`~stockade.errors.ConfigError`.
    Duplicates are dropped, order is kept.
    """
    if isinstance(hosts, str):
        raise ConfigError(
            f"hosts must be a list of entries, not the string {hosts!r}",
            hint=f'write hosts = ["{hosts}"]',
        )
    return tuple(dict.fromkeys(_parse_entry(entry) for entry in hosts))


def normalize(host: str) -> str:
    """``host`` as rules compare it: lower-case, no brackets, no trailing dot, canonical IP."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host.removesuffix(".")
    ip = literal_ip(host)
    return str(ip) if ip is not None else host


def match(rules: Sequence[Rule], host: str, port: int) -> Rule | None:
    """The first rule that allows the normalized ``host`` on ``port``, or None."""
    for rule in rules:
        if rule.port != port:
            continue
        if rule.wildcard:
            if host.endswith("." + rule.host) and len(host) > len(rule.host) + 1:
                return rule
        elif host == rule.host:
            return rule
    return None


def show(host: str, port: int) -> str:
    """``host:port`` as a person writes it (IPv6 in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def decide(rules: Sequence[Rule], host: str, port: int) -> tuple[bool, str]:
    """Whether ``host:port`` is allowed by ``rules``, and why, in words an agent can act on.

    Names compare case-insensitively and without a trailing dot; a wildcard rule matches
    subdomains of its suffix only; the port must match exactly.
    """
    name = normalize(host)
    rule = match(rules, name, port)
    target = show(name, port)
    if rule is None:
        if not rules:
            return False, f"{target} is not reachable: the profile names no hosts"
        shown = ", ".join(str(r) for r in rules[:SHOWN_RULES])
        if len(rules) > SHOWN_RULES:
            shown += f", and {len(rules) - SHOWN_RULES} more"
        return False, f"{target} is not in the profile's hosts ({shown})"
    if rule.wildcard:
        return True, f"{target} matches {rule} in the profile's hosts"
    return True, f"{target} is in the profile's hosts"


def forbidden(ip: IP) -> str | None:
    """Why an address must not be reached unless a rule names it, or None."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for kind in ("loopback", "link_local", "unspecified", "multicast", "private", "reserved"):
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    return None if ip.is_global else "not globally routable"
