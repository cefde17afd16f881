"""Credential injection's parts: the mask, the chunked body, placeholders, bindings, the
screen of plain requests, and the injecting tunnel against a live TLS upstream (no sandbox;
``tests/security/test_credential_injection.py`` attacks it from inside both)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import itertools
import json
import socket
import ssl
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.config.load import parse_config
from stockade.egress import http as egress_http
from stockade.egress import session, stream
from stockade.egress.ca import RunAuthority
from stockade.egress.command import CommandProxy
from stockade.egress.inject import Injection, Injector, placeholder
from stockade.errors import ConfigError
from stockade.record.redact import secret_forms
from stockade.request.spec import CredentialBinding

sys.path.insert(0, str(Path(__file__).parents[2] / "tests"))
from helpers.echo_tls import EchoUpstream

SECRET = "ghp_" + "Zx9" * 12


def masked(forms: list[bytes], pieces: list[bytes]) -> bytes:
    mask = stream.Mask(forms)
    return b"".join(mask.feed(p) for p in pieces) + mask.flush()


@settings(max_examples=300, deadline=None, database=None)
@given(
    secret=st.binary(min_size=1, max_size=12),
    parts=st.lists(st.binary(max_size=20), max_size=8),
    cuts=st.lists(st.integers(0, 400), max_size=6),
)
def test_the_mask_keeps_lengths_and_leaves_no_occurrence(secret, parts, cuts):
    data = secret.join(parts) if len(parts) > 1 else b"".join(parts) + secret
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds)]
    out = masked([secret], pieces)
    assert len(out) == len(data)
    assert secret not in out
    # Bytes no occurrence covers are kept as they were.
    covered = bytearray(len(data))
    at = data.find(secret)
    while at >= 0:
        covered[at : at + len(secret)] = b"\1" * len(secret)
        at = data.find(secret, at + 1)
    assert all(o == d for o, d, c in zip(out, data, covered, strict=True) if not c)


def test_a_form_split_across_reads_is_masked():
    forms = [f.encode() for f in secret_forms(SECRET)]
    text = b"echo: Bearer " + SECRET.encode() + b" and " + base64.b64encode(SECRET.encode())
    for cut in range(1, len(text)):
        out = masked(forms, [text[:cut], text[cut:]])
        assert len(out) == len(text)
        assert not any(f in out for f in forms)
        assert out.startswith(b"echo: Bearer ")


def source(data: bytes) -> stream.Source:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return stream.Source(reader)


async def dechunk(data: bytes, forms: list[bytes]) -> bytes:
    return b"".join([piece async for piece in stream.rechunk(source(data), stream.Mask(forms))])


def test_a_secret_split_across_chunks_is_masked_and_rechunked():
    body = b"token=" + SECRET.encode() + b"; done"
    half = 10
    chunked = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\nX-T: %s\r\n\r\n" % (
        half, body[:half], len(body) - half, body[half:], SECRET.encode()
    )  # fmt: skip
    out = asyncio.run(dechunk(chunked, [SECRET.encode()]))
    assert SECRET.encode() not in out
    assert out.endswith(b"0\r\n\r\n")  # trailers dropped
    # The data, taken back out of the new chunks, is the body with the secret masked.
    data, rest = b"", out
    while not rest.startswith(b"0\r\n"):
        size, _, rest = rest.partition(b"\r\n")
        data += rest[: int(size, 16)]
        rest = rest[int(size, 16) + 2 :]
    assert data == b"token=" + b"*" * len(SECRET) + b"; done"


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=300))
def test_a_chunked_body_parser_refuses_only_by_its_errors(data):
    with contextlib.suppress(egress_http.BadRequest, EOFError):
        asyncio.run(dechunk(data, [b"secret"]))


def test_placeholders_keep_the_prefix_and_are_random():
    first, second = placeholder(SECRET), placeholder(SECRET)
    assert first != second and first.startswith("ghp_") and len(first) >= len(SECRET)
    assert first[4:].isalnum()
    assert placeholder("plainvalue").startswith("stockade_")
    assert len(placeholder("sk-short12")) >= len("sk-") + 32


def test_bindings_render_bearer_format_and_basic():
    assert CredentialBinding("a.test").render("v") == "Bearer v"
    assert CredentialBinding("a.test", format="token {}").render("v") == "token v"
    basic = CredentialBinding("a.test", username="x-access-token").render("v")
    assert basic == "Basic " + base64.b64encode(b"x-access-token:v").decode()
    for bad in (
        {"header": "Host"},
        {"header": "Proxy-Authorization"},
        {"header": "bad name"},
        {"format": "Bearer"},
        {"format": "a {} b {}"},
        {"format": "x\r\n{}"},
        {"username": "a:b"},
        {"username": "u", "format": "{}"},
    ):
        with pytest.raises(ValueError, match=r"."):
            CredentialBinding("a.test", **bad)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('{ host = "evil.test" }', "the profile's hosts do not let it through"),
        ('{ host = "*.api.test" }', "no wildcard"),
        ('{ host = "api.test", header = "Content-Length" }', "frames or routes"),
        ('{ host = "api.test", hdr = "x" }', "unknown key 'hdr'"),
        ('"api.test"', "a binding is a table"),
    ],
)
def test_a_bad_binding_is_a_config_error_naming_it(entry, message):
    with pytest.raises(ConfigError, match=message) as caught:
        parse_config(f'[agents.a]\nhosts = ["api.test"]\n[agents.a.credentials]\ngh = {entry}\n')
    assert "$.agents['a'].credentials['gh']" in caught.value.message


def injection(host: str = "bound.test:443") -> Injection:
    return Injection.make(
        "GH_TOKEN", "github", CredentialBinding(host), SECRET, placeholder(SECRET)
    )


async def until_from(data: bytes, cuts: list[int], limit: int) -> bytes:
    reader = asyncio.StreamReader()
    for start, end in itertools.pairwise([0, *sorted(set(cuts)), len(data)]):
        reader.feed_data(data[start:end])
    reader.feed_eof()
    return await stream.Source(reader).until(b"\r\n\r\n", limit, "a head")


@settings(max_examples=200, deadline=None, database=None)
@given(st.integers(0, 60), st.integers(1, 80), st.lists(st.integers(0, 100), max_size=4))
def test_a_head_over_the_limit_is_refused_however_it_arrives(size, limit, cuts):
    """One read may bring a whole head over the limit: it is refused all the same."""
    data = b"x" * size + b"\r\n\r\n" + b"rest"
    cuts = [c for c in cuts if c <= len(data)]
    if size + 4 > limit:
        with pytest.raises(egress_http.BadRequest, match=f"a head over {limit} bytes"):
            asyncio.run(until_from(data, cuts, limit))
    else:
        assert asyncio.run(until_from(data, cuts, limit)) == data[: size + 4]


def test_the_screen_refuses_a_placeholder_in_a_plain_request(tmp_path):
    found = injection()
    injector = Injector([found], str(tmp_path), None)
    clean = egress_http.parse_head(b"GET /x HTTP/1.1\r\nHost: o.test")
    check = injector.screen(clean, "o.test", 80)
    check(b"first half " + found.placeholder.encode()[:10])
    with pytest.raises(egress_http.Refusal, match=r"'github' \(GH_TOKEN\) in its body") as body:
        check(found.placeholder.encode()[10:])
    assert "o.test:80" in body.value.reason and "bound.test:443" in body.value.reason
    basic = base64.b64encode(b"u:" + found.placeholder.encode()).decode()
    for head in (
        f"GET /x?t={found.placeholder} HTTP/1.1\r\nHost: o.test",
        f"GET /x HTTP/1.1\r\nHost: o.test\r\nAuthorization: Basic {basic}",
        f"GET /x HTTP/1.1\r\nHost: o.test\r\nCookie: a={found.placeholder.encode().hex()}",
        f"GET /x HTTP/1.1\r\nHost: o.test\r\nX-{found.placeholder}: 1",  # in a name
    ):
        with pytest.raises(egress_http.Refusal, match="placeholder of credential 'github'"):
            injector.screen(egress_http.parse_head(head.encode()), "o.test", 80)


def test_the_authority_vouches_only_for_its_hosts(tmp_path):
    authority = RunAuthority(["bound.test"], str(tmp_path))
    bundle = Path(authority.bundle).read_bytes()
    assert bundle.endswith(authority.certificate) and bundle.count(b"BEGIN CERTIFICATE") > 1
    assert b"PRIVATE KEY" not in bundle
    with pytest.raises(ValueError, match="not a host"):
        authority.server_context("other.test")
    assert list(tmp_path.iterdir()) == [Path(authority.bundle)]  # no key on disk


@pytest.fixture
def echo(tmp_path):
    server = EchoUpstream(tmp_path / "up", ("bound.test",))
    yield server
    server.close()


def proxied(echo, events, *, trust_upstream=True):
    found = Injection.make(
        "GH_TOKEN", "github", CredentialBinding(f"bound.test:{echo.port}"), SECRET,
        placeholder(SECRET),
    )  # fmt: skip
    proxy = CommandProxy(
        (f"bound.test:{echo.port}",),
        {"bound.test": "127.0.0.1"},
        events.append,
        injections=[found],
        upstream_ca=echo.cafile if trust_upstream else None,
    )
    return proxy, found


def get(proxy, port, headers, *, path="/echo"):
    context = ssl.create_default_context(cafile=proxy.ca_bundle)
    conn = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=context, timeout=10)
    conn.set_tunnel("bound.test", port)
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_the_tunnel_injects_and_masks_the_echo(echo):
    events = []
    proxy, found = proxied(echo, events)
    try:
        status, body = get(proxy, echo.port, {"Authorization": f"Bearer {found.placeholder}"})
    finally:
        proxy.close()
    assert status == 200
    assert dict(echo.seen[0]["headers"])["Authorization"] == f"Bearer {SECRET}"
    assert SECRET.encode() not in body and b"Bearer ****" in body
    [event] = events
    assert event.allowed and "credential 'github' put into authorization in 1" in event.reason


def test_an_upstream_the_proxy_cannot_verify_is_refused(echo):
    events = []
    proxy, found = proxied(echo, events, trust_upstream=False)
    try:
        status, body = get(proxy, echo.port, {"Authorization": f"Bearer {found.placeholder}"})
    finally:
        proxy.close()
    assert status == 502 and b"CERTIFICATE_VERIFY_FAILED" in body
    assert echo.seen == []  # the secret never went to an unverified peer
    assert not events[0].allowed


def test_a_client_hello_for_another_name_is_refused(echo):
    events = []
    proxy, _ = proxied(echo, events)
    context = ssl.create_default_context(cafile=proxy.ca_bundle)
    context.check_hostname = False  # the client would accept the leaf: the proxy refuses
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as raw:
            raw.sendall(f"CONNECT bound.test:{echo.port} HTTP/1.1\r\n\r\n".encode())
            assert raw.recv(100).startswith(b"HTTP/1.1 200")
            with pytest.raises(ssl.SSLError):  # an access_denied alert, or the end
                context.wrap_socket(raw, server_hostname="x.test")
    finally:
        proxy.close()
    assert echo.seen == []
    assert "TLS handshake with the client" in events[0].reason


def test_the_other_direction_sees_the_echo_only_masked_even_chunked(echo):
    events = []
    proxy, found = proxied(echo, events)
    try:
        status, body = get(
            proxy, echo.port, {"Authorization": f"Bearer {found.placeholder}"}, path="/chunked"
        )
    finally:
        proxy.close()
    assert status == 200
    assert SECRET.encode() not in body
    assert json.loads(body.split(b"\n", 1)[1])["path"] == "/chunked"


def test_expect_continue_is_answered_by_the_proxy(echo):
    events = []
    proxy, found = proxied(echo, events)
    context = ssl.create_default_context(cafile=proxy.ca_bundle)
    conn = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=context, timeout=10)
    conn.set_tunnel("bound.test", echo.port)
    try:
        conn.putrequest("POST", "/echo")
        conn.putheader("Authorization", f"Bearer {found.placeholder}")
        conn.putheader("Expect", "100-continue")
        conn.putheader("Content-Length", "5")
        conn.endheaders()
        raw = conn.sock.recv(100)  # before any body: the proxy's own interim answer
        assert raw == b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.send(b"a=1&b")
        response = conn.getresponse()
        assert response.status == 200
        response.read()
    finally:
        conn.close()
        proxy.close()
    headers = dict(echo.seen[0]["headers"])
    assert "Expect" not in headers and echo.seen[0]["body"] == "a=1&b"


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=200))
def test_a_response_head_parser_refuses_only_by_refusal(data):
    with contextlib.suppress(egress_http.Refusal):
        status, fields = session._response_head(data + b"\r\n\r\n")
        assert status >= 0 and all(name == name.lower() for name, _ in fields)


def test_a_bound_credential_is_a_placeholder_even_without_a_proxy(make_host, tmp_path):
    """danger-full-access has no proxy: the command gets the run's placeholder, never the
    value, and the same one in every command of the run."""
    from stockade.config.schema import Config
    from stockade.request.spec import ExecRequest, Profile

    profile = Profile(
        name="gh",
        hosts=("api.test",),
        workspace=str(tmp_path),
        credentials={"github": CredentialBinding("api.test")},
        # Two unconfined steps of a run that used a credential and printed: the breaker
        # would hold the second for a person; this test is about the placeholder alone.
        breaker="off-allow-exfiltration",
    )
    host = make_host(
        allow_all=True,
        config=Config(agents={"gh": profile}),
        environ={"STOCKADE_SECRET_GITHUB": SECRET, "PATH": "/usr/bin:/bin"},
    )
    show = [sys.executable, "-c", "import os; print(os.environ['T'])"]
    seen = []
    for _ in range(2):
        result = host.run(
            ExecRequest(
                show,
                str(tmp_path),
                mode="danger-full-access",
                profile="gh",
                credentials={"T": "github"},
            )
        )
        assert result.exit_code == 0, result.stderr.text
        seen.append(result.stdout.text.strip())
    assert seen[0] == seen[1] and seen[0].startswith("ghp_") and seen[0] != SECRET


def test_an_injecting_tunnel_asks_the_check_again_before_each_request(echo):
    """A kept connection to a bound host, opened while the run was clean: once the check
    refuses, its next request is answered 403 inside the tunnel and never goes upstream."""
    events, refuse = [], []
    found = Injection.make(
        "GH_TOKEN", "github", CredentialBinding(f"bound.test:{echo.port}"), SECRET,
        placeholder(SECRET),
    )  # fmt: skip
    proxy = CommandProxy(
        (f"bound.test:{echo.port}",),
        {"bound.test": "127.0.0.1"},
        events.append,
        injections=[found],
        upstream_ca=echo.cafile,
        check=lambda: refuse[0] if refuse else None,
    )
    context = ssl.create_default_context(cafile=proxy.ca_bundle)
    conn = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=context, timeout=10)
    conn.set_tunnel("bound.test", echo.port)
    try:
        conn.request("GET", "/echo", headers={"Authorization": f"Bearer {found.placeholder}"})
        assert conn.getresponse().read()
        refuse.append("the breaker: both")
        conn.request("POST", "/echo", body=b"canary")
        response = conn.getresponse()
        assert (response.status, response.read()) == (
            403,
            b"stockade egress proxy: the breaker: both\n",
        )
    finally:
        conn.close()
        proxy.close()
    assert [seen["path"] for seen in echo.seen] == ["/echo"]
    [event] = events
    assert not event.allowed and event.reason.startswith("the breaker: both")
