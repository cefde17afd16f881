"""sandbox-runtime's network cases (``integration.test.ts``) and its socket filter cases
(``seccomp-filter.test.ts``), ported case by case.

The peer allows domains for the whole sandbox; Stockade allows hosts for a command classed
``network`` whose profile names them, through the host's proxy. The peer's domains become
loopback names (``allowed.test`` ...) resolved by the proxy to a live server on 127.0.0.1,
so every refusal is counted against a server that answers the allowed request. Our own
tests of the same cases, not their code; each names the peer test it ports.
"""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest

from stockade.conformance.listen import Listener

from .peers_common import (
    BODY,
    CURL,
    PYTHON,
    SRT_INTEGRATION,
    SRT_SECCOMP,
    WGET,
    NetworkPython,
    http_upstream,
    net_config,
)

INET_BY_CLASS = (
    "differs: only commands classed network get inet sockets, TCP only; others get EPERM"
)
UDP_REFUSED = "differs: UDP is refused even to network commands (the proxy carries TCP only)"
PEERS = {
    "test_unix_socket_connections_are_blocked": (
        SRT_INTEGRATION,
        "should block Unix socket connections with seccomp",
        "pass",
        "pass",
    ),
    "test_blocks_http_to_non_allowlisted_domains": (
        SRT_INTEGRATION,
        "should block HTTP requests to non-allowlisted domains",
        "pass",
        "pass",
    ),
    "test_blocks_https_to_a_domain_not_in_the_allowlist": (
        SRT_INTEGRATION,
        "should block HTTP requests to anthropic.com (not in allowlist)",
        "pass",
        "pass",
    ),
    "test_allows_http_to_allowlisted_domains": (
        SRT_INTEGRATION,
        "should allow HTTP requests to allowlisted domains",
        "pass",
        "pass",
    ),
    "test_network_restrictions_across_protocols_and_ports": (
        SRT_INTEGRATION,
        "should enforce network restrictions across protocols and ports",
        "pass",
        "pass",
    ),
    "test_wildcard_domain_patterns": (
        SRT_INTEGRATION,
        "should enforce wildcard domain pattern matching correctly",
        "pass",
        "pass",
    ),
    "test_empty_hosts_block_http": (
        SRT_INTEGRATION,
        "should block all HTTP requests when allowedDomains is empty",
        "pass",
        "pass",
    ),
    "test_empty_hosts_block_https": (
        SRT_INTEGRATION,
        "should block all HTTPS requests when allowedDomains is empty",
        "pass",
        "pass",
    ),
    "test_empty_hosts_block_dns": (
        SRT_INTEGRATION,
        "should block DNS lookups when allowedDomains is empty",
        "pass",
        "pass",
    ),
    "test_empty_hosts_block_wget": (
        SRT_INTEGRATION,
        "should block wget when allowedDomains is empty",
        "pass",
        "pass",
    ),
    "test_files_work_while_network_is_blocked": (
        SRT_INTEGRATION,
        "should allow local filesystem operations when network is blocked",
        "pass",
        "pass",
    ),
    "test_specific_host_allowed": (
        SRT_INTEGRATION,
        "should allow HTTP to explicitly allowed domain",
        "pass",
        "pass",
    ),
    "test_specific_host_blocks_others": (
        SRT_INTEGRATION,
        "should block HTTP to non-allowed domain",
        "pass",
        "pass",
    ),
    "test_empty_versus_undefined_hosts": (
        SRT_INTEGRATION,
        "empty allowedDomains should block network",
        "pass",
        "pass",
    ),
    "test_unix_socket_creation[stream]": (
        SRT_SECCOMP,
        "should block Unix socket creation (SOCK_STREAM)",
        "pass",
        "pass",
    ),
    "test_unix_socket_creation[dgram]": (
        SRT_SECCOMP,
        "should block Unix socket creation (SOCK_DGRAM)",
        "pass",
        "pass",
    ),
    "test_inet_socket_creation[tcp4]": (
        SRT_SECCOMP,
        "should allow TCP socket creation (IPv4)",
        INET_BY_CLASS,
        INET_BY_CLASS,
    ),
    "test_inet_socket_creation[udp4]": (
        SRT_SECCOMP,
        "should allow UDP socket creation (IPv4)",
        UDP_REFUSED,
        UDP_REFUSED,
    ),
    "test_inet_socket_creation[tcp6]": (
        SRT_SECCOMP,
        "should allow IPv6 socket creation",
        INET_BY_CLASS,
        INET_BY_CLASS,
    ),
    "test_network_path_runs_while_the_filter_holds": (
        SRT_SECCOMP,
        "should allow network infrastructure to run before filter",
        "pass",
        "pass",
    ),
    "test_user_command_runs_with_the_filter": (
        SRT_SECCOMP,
        "should execute user command with filter applied",
        "pass",
        "pass",
    ),
    "test_unrestricted_only_when_explicit": (
        SRT_SECCOMP,
        "should handle commands without network or filesystem restrictions",
        "differs: no unrestricted sandbox; danger-full-access runs only with sandbox 'none'",
        "differs: no unrestricted sandbox; danger-full-access runs only with sandbox 'none'",
    ),
    "test_commands_are_wrapped_with_filesystem_rules": (
        SRT_SECCOMP,
        "should wrap commands with filesystem restrictions",
        "pass",
        "pass",
    ),
    "test_seccomp_for_every_confined_run": (
        SRT_SECCOMP,
        "should include seccomp for ANT users with dependencies",
        "pass",
        "pass",
    ),
}


@pytest.fixture
def upstream():
    with http_upstream() as port:
        assert (
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read() == BODY.encode()
        )
        yield port  # the control above: the host itself reaches the server


def _curl(box, *args):
    return box.request([CURL, "-sS", "--max-time", "10", *args], profile="net")


def _net_host(make_host, box, hosts, names=()):
    return make_host(allow_all=True, config=net_config(box, hosts, names))


def _blocked(result):
    assert BODY not in result.stdout.text, result.stdout.text
    return result


def _refused_by_rule(result):
    _blocked(result)
    assert "not in the profile's hosts" in result.stdout.text, (
        result.stdout.text + result.stderr.text
    )


UNIX = """
import socket, sys
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1]); s.send(b"Test message"); print("CONNECTED")
except OSError as e:
    print("refused", e.strerror)
"""


# integration.test.ts: should block Unix socket connections with seccomp
def test_unix_socket_connections_are_blocked(host, box):
    listener = Listener(socket.AF_UNIX, socket.SOCK_STREAM, str(box.outside / "test.sock"))
    try:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.connect(str(box.outside / "test.sock"))  # control: the host reaches it
        probe.close()
        result = host.run(box.py(UNIX, str(box.outside / "test.sock")))
        assert result.stdout.text.startswith("refused"), result.stdout.text
    finally:
        listener.close()


# integration.test.ts: should block HTTP requests to non-allowlisted domains
def test_blocks_http_to_non_allowlisted_domains(make_host, box, upstream):
    host = _net_host(make_host, box, (f"allowed.test:{upstream}",), ("blocked-domain.test",))
    _refused_by_rule(host.run(_curl(box, f"http://blocked-domain.test:{upstream}/")))
    assert host.run(_curl(box, f"http://allowed.test:{upstream}/")).stdout.text == BODY


# integration.test.ts: should block HTTP requests to anthropic.com (not in allowlist)
def test_blocks_https_to_a_domain_not_in_the_allowlist(make_host, box, upstream):
    host = _net_host(make_host, box, (f"allowed.test:{upstream}",))
    result = _blocked(host.run(_curl(box, "https://www.anthropic.com")))
    assert result.exit_code != 0
    assert [r.host for r in result.refused] == ["www.anthropic.com"]


# integration.test.ts: should allow HTTP requests to allowlisted domains
def test_allows_http_to_allowlisted_domains(make_host, box, upstream):
    host = _net_host(make_host, box, (f"allowed.test:{upstream}",))
    result = host.run(_curl(box, f"http://allowed.test:{upstream}/"))
    assert (result.exit_code, result.stdout.text) == (0, BODY), result.stderr.text


# integration.test.ts: should enforce network restrictions across protocols and ports
def test_network_restrictions_across_protocols_and_ports(make_host, box, upstream):
    host = _net_host(make_host, box, (f"allowed.test:{upstream}",), ("blocked-domain.test",))
    assert host.run(_curl(box, "https://blocked-domain.test")).exit_code != 0
    _refused_by_rule(host.run(_curl(box, f"http://blocked-domain.test:{upstream}/")))
    _refused_by_rule(host.run(_curl(box, f"http://allowed.test:{upstream + 1}/")))  # other port
    _refused_by_rule(host.run(_curl(box, f"http://127.0.0.1:{upstream}/")))  # a bare IP
    assert host.run(_curl(box, f"http://allowed.test:{upstream}/")).stdout.text == BODY


# integration.test.ts: should enforce wildcard domain pattern matching correctly
def test_wildcard_domain_patterns(make_host, box, upstream):
    names = ("api.allowed.test", "malicious-allowed.test", "example.test")
    hosts = (f"*.allowed.test:{upstream}", f"example.test:{upstream}")
    host = _net_host(make_host, box, hosts, names)
    assert host.run(_curl(box, f"http://api.allowed.test:{upstream}/")).stdout.text == BODY
    assert host.run(_curl(box, f"http://example.test:{upstream}/")).stdout.text == BODY
    _refused_by_rule(host.run(_curl(box, f"http://allowed.test:{upstream}/")))  # not the apex
    _refused_by_rule(host.run(_curl(box, f"http://malicious-allowed.test:{upstream}/")))


def _bare_host(make_host, box):
    return _net_host(make_host, box, ())


# integration.test.ts: should block all HTTP requests when allowedDomains is empty
def test_empty_hosts_block_http(make_host, box, upstream):
    result = _bare_host(make_host, box).run(_curl(box, f"http://allowed.test:{upstream}/"))
    assert _blocked(result).exit_code != 0


# integration.test.ts: should block all HTTPS requests when allowedDomains is empty
def test_empty_hosts_block_https(make_host, box, upstream):
    result = _bare_host(make_host, box).run(_curl(box, "https://example.com"))
    assert _blocked(result).exit_code != 0


# integration.test.ts: should block DNS lookups when allowedDomains is empty
def test_empty_hosts_block_dns(make_host, box):
    host = _bare_host(make_host, box)
    looked = host.run(box.request(["getent", "ahosts", "example.com"], profile="net"))
    assert looked.exit_code != 0 and not looked.stdout.text
    assert host.run(box.request(["getent", "hosts", "localhost"], profile="net")).exit_code == 0


# integration.test.ts: should block wget when allowedDomains is empty
def test_empty_hosts_block_wget(make_host, box, upstream):
    argv = [WGET, "--tries=1", "--timeout=5", "-qO-", f"http://allowed.test:{upstream}/"]
    result = _bare_host(make_host, box).run(box.request(argv, profile="net"))
    assert _blocked(result).exit_code != 0


# integration.test.ts: should allow local filesystem operations when network is blocked
def test_files_work_while_network_is_blocked(make_host, box):
    script = "echo 'test content with network blocked' > nb.txt && cat nb.txt"
    result = _bare_host(make_host, box).run(box.request(["sh", "-c", script], profile="net"))
    assert result.stdout.text == "test content with network blocked\n", result.stderr.text


# integration.test.ts: should allow HTTP to explicitly allowed domain
def test_specific_host_allowed(make_host, box, upstream):
    host = _net_host(make_host, box, (f"example.test:{upstream}",), ("example.test",))
    assert host.run(_curl(box, f"http://example.test:{upstream}/")).stdout.text == BODY


# integration.test.ts: should block HTTP to non-allowed domain
def test_specific_host_blocks_others(make_host, box, upstream):
    host = _net_host(make_host, box, (f"example.test:{upstream}",), ("example.test",))
    _refused_by_rule(host.run(_curl(box, f"http://allowed.test:{upstream}/")))


# integration.test.ts: empty allowedDomains should block network. Stockade has no
# "undefined means everything": a profile without hosts and one with [] both block.
def test_empty_versus_undefined_hosts(make_host, box, upstream):
    from stockade.config.schema import Config
    from stockade.request.spec import Profile

    for hosts in ((), None):
        agent = Profile(
            name="net",
            ask=(),
            workspace=str(box.ws),
            **({"hosts": hosts} if hosts is not None else {}),
        )
        config = Config(sandbox=box.sandbox, agents={"net": agent})
        result = make_host(allow_all=True, config=config).run(
            _curl(box, f"http://127.0.0.1:{upstream}/")
        )
        assert _blocked(result).exit_code != 0


CREATE = """
import json, socket, sys
family, kind = {"stream": (socket.AF_UNIX, socket.SOCK_STREAM),
                "dgram": (socket.AF_UNIX, socket.SOCK_DGRAM),
                "tcp4": (socket.AF_INET, socket.SOCK_STREAM),
                "udp4": (socket.AF_INET, socket.SOCK_DGRAM),
                "tcp6": (socket.AF_INET6, socket.SOCK_STREAM)}[sys.argv[1]]
try:
    socket.socket(family, kind).close()
    print(json.dumps("created"))
except OSError as e:
    print(json.dumps(e.strerror))
"""


# seccomp-filter.test.ts: should block Unix socket creation (SOCK_STREAM / SOCK_DGRAM)
@pytest.mark.parametrize("kind", ["stream", "dgram"])
def test_unix_socket_creation(host, box, kind):
    result = host.run(box.py(CREATE, kind))
    assert json.loads(result.stdout.text) == "Operation not permitted", result.stderr.text


# seccomp-filter.test.ts: should allow TCP / UDP / IPv6 socket creation
@pytest.mark.parametrize("kind", ["tcp4", "udp4", "tcp6"])
def test_inet_socket_creation(make_host, box, kind):
    plain = make_host(allow_all=True, config=net_config(box, ("allowed.test:80",)))
    (box.ws / "create.py").write_text(CREATE)  # a script file: `python -c` is classed destroys
    script = box.request([PYTHON, "-S", "create.py", kind], profile="net")
    refused = plain.run(script)  # classed writes: no inet at all
    assert json.loads(refused.stdout.text) == "Operation not permitted"
    network = make_host(
        allow_all=True, config=net_config(box, ("allowed.test:80",)), plugins=[NetworkPython()]
    )
    classed = network.run(script)
    assert classed.classification.kind == "network"
    expected = "Operation not permitted" if kind == "udp4" else "created"
    assert json.loads(classed.stdout.text) == expected, classed.stderr.text


STATUS = "print([x for x in open('/proc/self/status') if x.startswith('Seccomp:')][0], end='')"


# seccomp-filter.test.ts: should allow network infrastructure to run before filter
# (Stockade's in-sandbox forwarder carries the request while the command is filtered)
def test_network_path_runs_while_the_filter_holds(make_host, box, upstream):
    host = make_host(
        allow_all=True,
        config=net_config(box, (f"allowed.test:{upstream}",)),
        plugins=[NetworkPython()],
    )
    fetch = (
        "import urllib.request\n"
        f"reply = urllib.request.urlopen('http://allowed.test:{upstream}/', timeout=10)\n"
        "print(reply.read().decode(), end='')\n" + STATUS
    )
    (box.ws / "fetch.py").write_text(fetch)
    result = host.run(box.request([PYTHON, "-S", "fetch.py"], profile="net"))
    assert result.stdout.text == BODY + "Seccomp:\t2\n", result.stderr.text


# seccomp-filter.test.ts: should execute user command with filter applied
def test_user_command_runs_with_the_filter(host, box, mode):
    result = host.run(box.py(STATUS, mode=mode))
    assert result.stdout.text == "Seccomp:\t2\n", result.stderr.text


# seccomp-filter.test.ts: should handle commands without network or filesystem restrictions
def test_unrestricted_only_when_explicit(host, box):
    from stockade.errors import SandboxUnavailable

    with pytest.raises(SandboxUnavailable):
        host.run(box.py(STATUS, mode="danger-full-access"))
    request = box.py(STATUS, mode="danger-full-access")
    free = host.run(
        type(request)(
            request.argv,
            request.cwd,
            mode="danger-full-access",
            env=request.env,
            sandbox="none",
            timeout=60,
        )
    )
    assert free.stdout.text == "Seccomp:\t0\n"


# seccomp-filter.test.ts: should wrap commands with filesystem restrictions
def test_commands_are_wrapped_with_filesystem_rules(host, box):
    result = host.run(box.request(["sh", "-c", f"echo x > {box.outside / 'x'}; echo y > y"]))
    assert not (box.outside / "x").exists() and (box.ws / "y").read_text() == "y\n"
    assert box.write_refused in result.stderr.text


# seccomp-filter.test.ts: should include seccomp for ANT users with dependencies
# (Stockade has no user gating: every confined run of every mode is filtered)
def test_seccomp_for_every_confined_run(host, box, mode):
    result = host.run(box.request(["grep", "^Seccomp:", "/proc/self/status"], mode=mode))
    assert result.stdout.text == "Seccomp:\t2\n"
