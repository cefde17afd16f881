"""The proxy's request parser: strict heads, targets, Host, bodies; fuzzed for its one error."""

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.egress.http import (
    MAX_HEADERS,
    BadRequest,
    BodyReader,
    Refusal,
    Request,
    body_reader,
    check_host_header,
    check_partial,
    connect_target,
    forward_head,
    forward_target,
    parse_head,
)


def head(*lines):
    return "\r\n".join(lines).encode("latin-1")


# --- heads ---------------------------------------------------------------------------------------


def test_a_head_parses_and_serialises_back():
    raw = head("GET http://a.test/x?y=1 HTTP/1.1", "Host: a.test", "X-Pad:  v  w ", "Empty:")
    request = parse_head(raw)
    assert request == Request(
        "GET",
        "http://a.test/x?y=1",
        "HTTP/1.1",
        (("Host", "a.test"), ("X-Pad", "v  w"), ("Empty", "")),
    )
    assert parse_head(request.serialize()[:-4]) == request


def test_obs_text_in_a_value_is_kept_exactly():
    request = parse_head(head("GET http://a.test/ HTTP/1.1", "X: caf\xe9\t1"))
    assert request.headers == (("X", "caf\xe9\t1"),)
    assert b"caf\xe9\t1" in request.serialize()


BAD_HEADS = [
    (b"", "malformed request line"),
    (b"GET  http://a.test/ HTTP/1.1", "malformed request line"),
    (b"GET http://a.test/\tx HTTP/1.1", "malformed request line"),
    (b"GET http://a.test/\xff HTTP/1.1", "malformed request line"),
    (b"G(T http://a.test/ HTTP/1.1", "malformed request line"),
    (b"GET http://a.test/ HTTP/2.0", "unsupported protocol"),
    (b"GET http://a.test/ http/1.1", "unsupported protocol"),
    (head("GET http://a.test/ HTTP/1.1", "X: a\nHost: other.test"), "bare CR or LF"),
    (head("GET http://a.test/ HTTP/1.1", "X: a\rHost: other.test"), "bare CR or LF"),
    (head("GET http://a.test/ HTTP/1.1\n"), "bare CR or LF"),
    (head("GET http://a.test/ HTTP/1.1", "X: a\0b"), "NUL"),
    (head("GET http://a.test/ HTTP/1.1", "X: a\x01b"), "control character"),
    (head("GET http://a.test/ HTTP/1.1", "X: a\x7fb"), "control character"),
    (head("GET http://a.test/ HTTP/1.1", "X: a", " folded"), "folded"),
    (head("GET http://a.test/ HTTP/1.1", "X: a", "\tfolded"), "folded"),
    (head("GET http://a.test/ HTTP/1.1", "X : a"), "bad header name"),
    (head("GET http://a.test/ HTTP/1.1", "X\xe9: a"), "bad header name"),
    (head("GET http://a.test/ HTTP/1.1", ": a"), "bad header name"),
    (head("GET http://a.test/ HTTP/1.1", "no colon"), "no colon"),
    (head("GET http://a.test/ HTTP/1.1\r"), "bare CR"),
]


@pytest.mark.parametrize(("raw", "why"), BAD_HEADS)
def test_malformed_heads_are_refused(raw, why):
    with pytest.raises(BadRequest, match=why) as info:
        parse_head(raw)
    assert info.value.status == "400 Bad Request"


def test_too_many_headers_is_431():
    raw = head("GET http://a.test/ HTTP/1.1", *[f"X{i}: v" for i in range(MAX_HEADERS + 1)])
    with pytest.raises(BadRequest) as info:
        parse_head(raw)
    assert info.value.status.startswith("431")


def test_check_partial_sees_a_break_across_reads():
    data = b"GET / HTTP/1.1\r\nX: a\r"
    check_partial(data)  # a CR at the end may be half a CRLF
    with pytest.raises(BadRequest):
        check_partial(data + b"Host: b", len(data) - 1)
    check_partial(data + b"\nHost: b", len(data) - 1)
    with pytest.raises(BadRequest):
        check_partial(b"GET / HTTP/1.1\nX", 10)


# --- targets -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "parsed"),
    [
        ("http://a.test/x?y", ("a.test", 80, "/x?y")),
        ("HTTP://A.Test.:8080", ("a.test", 8080, "/")),
        ("http://a.test?q", ("a.test", 80, "/?q")),
        ("http://[::1]:81/", ("::1", 81, "/")),
        ("http://127.0.0.1/", ("127.0.0.1", 80, "/")),
    ],
)
def test_forward_targets(target, parsed):
    assert forward_target(target) == parsed


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("http://[zz/", "malformed host"),
        ("http://[zz", "malformed host"),
        ("http://[::1/", "malformed host"),
        ("http://[a.test]/", "malformed host"),
        ("http://[zz:1]/", "does not name a valid host"),
        ("http://a.test:0/", "bad port"),
        ("http://a.test:65536/", "bad port"),
        ("http://a.test:/", "bad port"),
        ("http://a.test:8o/", "bad port"),
        ("http://a.test:+80/", "bad port"),
        ("http://a.test:1:2/", "bad port"),
        ("http://user@a.test/", "user info"),
        ("http://a.test@b.test/", "user info"),
        ("http://a%2etest/", "user info or escapes"),
        ("http://[::1%25eth0]/", "user info or escapes"),
        ("http://a.test/#frag", "fragment"),
        ("http:///x", "no host"),
        ("http://a..test/", "valid host"),
        ("http://-a.test/", "valid host"),
        ("http://1.2.3/", "valid host"),
        ("http://a_b!.test/", "valid host"),
        ("https://a.test/", "with CONNECT"),
        ("/relative", "this is a proxy"),
        ("a.test:80", "this is a proxy"),
    ],
)
def test_bad_forward_targets(target, why):
    with pytest.raises(BadRequest, match=why):
        forward_target(target)


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("a.test", "needs host:port"),
        ("a.test:99999", "bad port"),
        ("[zz]:443", "malformed"),
        ("[zz:1]:443", "valid host"),
        ("[::1]443", "malformed"),
        (":443", "valid host"),
        ("a.test:443/x", "bad port"),
    ],
)
def test_bad_connect_targets(target, why):
    with pytest.raises(BadRequest, match=why):
        connect_target(target)


def test_connect_targets():
    assert connect_target("A.test.:443") == ("a.test", 443)
    assert connect_target("[0:0::1]:8443") == ("::1", 8443)


# --- Host ----------------------------------------------------------------------------------------


def request_with(*headers, version="HTTP/1.1"):
    return Request("GET", "http://a.test/", version, tuple(headers))


@pytest.mark.parametrize(
    ("headers", "host", "port"),
    [
        ([("Host", "a.test")], "a.test", 80),
        ([("host", "A.TEST.:80")], "a.test", 80),
        ([("Host", "a.test:8080")], "a.test", 8080),
        ([("Host", "[::1]:81")], "::1", 81),
    ],
)
def test_a_matching_host_passes(headers, host, port):
    check_host_header(request_with(*headers), host, port)


@pytest.mark.parametrize(
    ("headers", "status", "why"),
    [
        ([("Host", "other.test")], "403", "names 'other.test' but the request is for a.test:80"),
        ([("Host", "a.test:81")], "403", "names 'a.test:81'"),
        ([("Host", "sub.a.test")], "403", "but the request is for"),
        ([], "400", "needs a Host"),
        ([("Host", "a.test"), ("Host", "a.test")], "400", "2 Host headers"),
        ([("Host", "a.test, b.test")], "400", "valid host"),
        ([("Host", "")], "400", "valid host"),
        ([("Host", "u@a.test")], "400", "user info"),
    ],
)
def test_a_host_that_differs_is_refused(headers, status, why):
    with pytest.raises(Refusal, match=why) as info:
        check_host_header(request_with(*headers), "a.test", 80)
    assert info.value.status.startswith(status)


def test_http_1_0_may_omit_host():
    check_host_header(request_with(version="HTTP/1.0"), "a.test", 80)


def test_forward_head_writes_its_own_host_and_drops_hop_by_hop():
    request = request_with(
        ("Host", "a.test"),
        ("Proxy-Authorization", "x"),
        ("Connection", "keep-alive, X-Drop"),
        ("X-Drop", "1"),
        ("X-Keep", "2"),
        ("Keep-Alive", "3"),
    )
    out = parse_head(forward_head(request, "/p", "a.test", 8080)[:-4])
    assert out == Request(
        "GET",
        "/p",
        "HTTP/1.1",
        (("Host", "a.test:8080"), ("X-Keep", "2"), ("Connection", "close")),
    )


@pytest.mark.parametrize("named", ["Content-Length", "transfer-encoding", "HOST"])
def test_connection_may_not_drop_a_framing_header(named):
    with pytest.raises(BadRequest, match="Connection names"):
        forward_head(request_with(("Connection", f"close, {named}")), "/", "a.test", 80)


# --- bodies --------------------------------------------------------------------------------------


def feed_all(reader, data, step):
    out = b""
    for at in range(0, len(data), step):
        out += reader.feed(data[at : at + step])
    return out


CHUNKED = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\nX-Trailer: t\r\n\r\n"


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_a_chunked_body_streams_through_whole(step):
    reader = BodyReader(chunked=True)
    assert feed_all(reader, CHUNKED + b"GET /smuggled HTTP/1.1\r\n", step) == CHUNKED
    assert reader.done
    assert reader.excess == len(b"GET /smuggled HTTP/1.1\r\n")


@pytest.mark.parametrize("step", [1, 5, 1000])
def test_a_fixed_body_stops_at_its_length(step):
    reader = BodyReader(length=5)
    assert feed_all(reader, b"helloGET / HTTP/1.1", step) == b"hello"
    assert reader.done
    assert reader.excess == len(b"GET / HTTP/1.1")


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"x\r\n", "chunk size"),
        (b"-1\r\n", "chunk size"),
        (b"4 \r\n", "chunk size"),
        (b"1234567890abcdef0\r\nx", "chunk size"),
        (b"4\nWiki\r\n", "bare CR or LF"),
        (b"4\r\r\nWiki\r\n", "bare CR or LF"),
        (b"4\r\nWikiXY", "not followed by CRLF"),
        (b"4\r\nWiki\r\n0\r\nbad trailer\r\n\r\n", "no colon"),
        (b"4;\x01\r\n", "chunk size"),
        (b"f" * 5000, "over"),
    ],
)
def test_bad_chunks_are_refused(body, why):
    with pytest.raises(BadRequest, match=why):
        BodyReader(chunked=True).feed(body)


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ([("Content-Length", "5"), ("Transfer-Encoding", "chunked")], "both"),
        ([("Transfer-Encoding", "gzip, chunked")], "only chunked"),
        ([("Transfer-Encoding", "chunked"), ("Transfer-Encoding", "chunked")], "only chunked"),
        ([("Transfer-Encoding", "xchunked")], "only chunked"),
        ([("Content-Length", "5"), ("Content-Length", "6")], "one number"),
        ([("Content-Length", "5, 6")], "one number"),
        ([("Content-Length", "-5")], "one number"),
        ([("Content-Length", "0x5")], "one number"),
        ([("Content-Length", "")], "one number"),
    ],
)
def test_ambiguous_framing_is_refused(headers, why):
    with pytest.raises(BadRequest, match=why):
        body_reader(request_with(*headers))


def test_framing_choices():
    assert body_reader(request_with()).done
    assert not body_reader(request_with(("Content-Length", "5, 5"))).done
    assert body_reader(request_with(("Transfer-Encoding", "Chunked"))).chunked
    with pytest.raises(BadRequest):
        body_reader(request_with(("Transfer-Encoding", "chunked"), version="HTTP/1.0"))


# --- fuzzing -------------------------------------------------------------------------------------

_NASTY = st.sampled_from(["\r", "\n", "\0", "\x7f", " ", "\t", ":", "\xe9", "\xff", "\x0b", ","])
_TEXT = st.lists(st.one_of(st.text(max_size=6), _NASTY), max_size=6).map("".join)


def _encode(text):
    return text.encode("utf-8") if any(ord(c) > 255 for c in text) else text.encode("latin-1")


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_raw_heads_raise_only_bad_request(raw):
    for candidate in (raw, b"GET http://a.test/ HTTP/1.1\r\n" + raw):
        try:
            request = parse_head(candidate)
        except BadRequest:
            continue
        assert parse_head(request.serialize()[:-4]) == request


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from(["GET", "POST", "CONNECT", "get", "G T"]),
    _TEXT,
    st.lists(st.tuples(_TEXT, _TEXT), max_size=5),
)
def test_fuzz_built_requests_keep_exactly_their_headers(method, target, headers):
    raw = _encode(f"{method} http://a.test/{target} HTTP/1.1") + b"".join(
        b"\r\n" + _encode(name) + b":" + _encode(value) for name, value in headers
    )
    try:
        request = parse_head(raw)
    except BadRequest:
        return
    # Accepted: names are tokens, values hold no CR, LF or NUL, and it round-trips exactly.
    assert len(request.headers) == len(headers)
    for name, value in request.headers:
        assert not any(c in name + value for c in "\r\n\0")
        assert ":" not in name
    again = parse_head(request.serialize()[:-4])
    assert again == request
    try:
        host, port, path = forward_target(request.target)
        check_host_header(request, host, port)
        forwarded = parse_head(forward_head(request, path, host, port)[:-4])
    except Refusal:
        return
    # Forwarded: only the proxy's Host and Connection, the rest exactly as parsed, in order.
    named = {t.strip().lower() for v in request.values("connection") for t in v.split(",")}
    hop = {"connection", "keep-alive", "te", "trailer", "upgrade", "host", *named}
    kept = [h for h in request.headers if not (h[0].lower() in hop or h[0][:6].lower() == "proxy-")]
    assert forwarded.headers == (("Host", "a.test"), *kept, ("Connection", "close"))


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=40))
def test_fuzz_targets_raise_only_refusals(text):
    for call in (forward_target, connect_target):
        for candidate in (text, "http://" + text, text + ":443"):
            with contextlib.suppress(BadRequest):
                call(candidate)
    with contextlib.suppress(Refusal):
        check_host_header(request_with(("Host", text)), "a.test", 80)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200), st.integers(1, 50), st.booleans(), st.integers(0, 100))
def test_fuzz_bodies_split_anywhere_read_the_same(data, step, chunked, length):
    def run(piece):
        reader = BodyReader(chunked=chunked, length=length)
        try:
            return feed_all(reader, data, piece), reader.done, reader.excess
        except BadRequest:
            return "bad"

    whole = run(max(1, len(data)))
    assert run(step) == whole
    if whole != "bad":
        forwarded, _, excess = whole
        assert len(forwarded) + excess == len(data)
        assert data.startswith(forwarded)


# --- a parser bug is still an answer and an event ----------------------------------------------


def test_an_unexpected_failure_answers_500_and_is_recorded(monkeypatch, capfd):
    import socket

    from stockade.egress import http as egress_http
    from stockade.egress.proxy import Proxy, parse_hosts

    def broken(head):
        raise RuntimeError("a bug")

    seen = []
    proxy = Proxy(parse_hosts(["a.test"]), on_connection=seen.append)
    try:
        port = proxy.serve_tcp()
        monkeypatch.setattr(egress_http, "parse_head", broken)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n")
            reply = b""
            while data := sock.recv(4096):
                reply += data
        monkeypatch.undo()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET http://[zz/ HTTP/1.1\r\n\r\n")
            assert sock.recv(4096).startswith(b"HTTP/1.1 400")  # the proxy lives on
    finally:
        proxy.close()
    assert reply.startswith(b"HTTP/1.1 500")
    assert b"RuntimeError: a bug" in reply
    assert not seen[0].allowed
    assert "RuntimeError: a bug" in seen[0].reason
    assert "a bug" in capfd.readouterr().err  # the traceback, for whoever runs the host
