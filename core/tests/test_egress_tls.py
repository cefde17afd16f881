"""The tunnel's peek: parsing a TLS ClientHello's server name, whole, split, hostile."""

import contextlib
import ssl

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.egress.tls import (
    HELLO_LIMIT,
    HRR_RANDOM,
    ClientHello,
    HandshakeWatch,
    NotHello,
    read_client_hello,
    verdict,
)


def real_hello(server_hostname):
    """The first flight of Python's own TLS client: one or more records holding a ClientHello."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def handshake_of(records):
    """The handshake bytes inside ``records`` (record headers dropped)."""
    out, at = b"", 0
    while at < len(records):
        length = int.from_bytes(records[at + 3 : at + 5], "big")
        out += records[at + 5 : at + 5 + length]
        at += 5 + length
    return out


def reframe(message, sizes, version=b"\x03\x01"):
    """``message`` cut into handshake records of the given sizes (cycled), as a client may."""
    out, at, i = b"", 0, 0
    while at < len(message):
        size = max(1, sizes[i % len(sizes)])
        piece = message[at : at + size]
        out += b"\x16" + version + len(piece).to_bytes(2, "big") + piece
        at += size
        i += 1
    return out


def vec(width, data):
    return len(data).to_bytes(width, "big") + data


def build_hello(name=b"allowed.test", extensions=None, *, sni_entries=None):
    """A minimal ClientHello handshake message; ``extensions`` replaces the generated list."""
    if extensions is None:
        extensions = []
        if name is not None or sni_entries is not None:
            entries = sni_entries if sni_entries is not None else [(0, name)]
            names = b"".join(bytes([kind]) + vec(2, value) for kind, value in entries)
            extensions.append((0, vec(2, names)))
        extensions.append((43, vec(1, b"\x03\x04")))  # supported_versions
    body = b"\x03\x03" + bytes(32) + vec(1, b"") + vec(2, b"\x13\x01") + vec(1, b"\x00")
    body += vec(2, b"".join(kind.to_bytes(2, "big") + vec(2, data) for kind, data in extensions))
    return b"\x01" + len(body).to_bytes(3, "big") + body


# --- real ClientHellos -------------------------------------------------------------------------


def test_a_real_client_hello_names_its_server():
    records = real_hello("Allowed.Test")
    hello = read_client_hello(records)
    assert hello == ClientHello("Allowed.Test", False, len(records))
    assert verdict(hello, "allowed.test") is None


def test_a_real_client_hello_without_sni():
    hello = read_client_hello(real_hello(None))
    assert hello is not None
    assert hello.server_name is None


def test_every_prefix_asks_for_more_and_the_whole_answers():
    records = real_hello("allowed.test")
    for cut in range(len(records)):
        assert read_client_hello(records[:cut]) is None, cut
    assert read_client_hello(records).server_name == "allowed.test"


@pytest.mark.parametrize("sizes", [[1], [3, 700], [4], [5000], [2, 1, 9]])
def test_a_hello_split_over_records(sizes):
    records = reframe(handshake_of(real_hello("allowed.test")), sizes)
    hello = read_client_hello(records)
    assert hello is not None
    assert (hello.server_name, hello.size) == ("allowed.test", len(records))
    assert read_client_hello(records[:-1]) is None


def test_bytes_after_the_hello_are_left_for_the_relay():
    records = real_hello("allowed.test")
    hello = read_client_hello(records + b"\x17\x03\x03\x00\x05early")
    assert hello.size == len(records)


# --- refusals ----------------------------------------------------------------------------------

GOOD = build_hello()


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x15\x03\x01\x00\x02\x01\x00" + reframe(GOOD, [9999]), "type 21"),
        (b"\x17\x03\x03\x00\x01x", "type 23"),
        (b"\x16\x02\x00\x00\x01\x01", "record version 2.0"),
        (b"\x16\x03\x05\x00\x01\x01", "record version 3.5"),
        (b"\x16\x03\x01\x00\x00", "of 0 bytes"),
        (b"\x16\x03\x01\x40\x01", "of 16385 bytes"),
        (reframe(b"\x02" + GOOD[1:], [9999]), "not a ClientHello"),
        (reframe(GOOD + b"\x14\x00\x00\x00", [9999]), "after the ClientHello"),
        (reframe(b"\x01\x01\x00\x01" + bytes(4), [9999]), "over"),
        (reframe(build_hello(sni_entries=[(0, b"a.test"), (0, b"b.test")]), [999]), "exactly one"),
        (reframe(build_hello(sni_entries=[(1, b"a.test")]), [999]), "exactly one"),
        (reframe(build_hello(sni_entries=[(0, b"")]), [999]), "exactly one"),
        (reframe(build_hello(b"b\xfccher.test"), [999]), "not ASCII"),
        (reframe(build_hello(extensions=[(0, b""), (43, b"")]), [999]), "past its end"),
        (reframe(build_hello(extensions=[(43, b""), (43, b"")]), [999]), "twice"),
        (reframe(b"\x01" + (len(GOOD) - 5).to_bytes(3, "big") + GOOD[4:-1], [999]), "past its end"),
    ],
)
def test_malformed_hellos_are_refused(data, why):
    with pytest.raises(NotHello, match=why):
        read_client_hello(data)


def test_a_huge_hello_is_refused_before_it_is_whole():
    data = reframe(b"\x01" + HELLO_LIMIT.to_bytes(3, "big") + bytes(HELLO_LIMIT), [1])
    with pytest.raises(NotHello):
        read_client_hello(data[: HELLO_LIMIT + 100])


def test_a_hello_of_one_byte_records_cannot_grow_without_bound():
    data = reframe(build_hello(b"a" * 60 + b".test"), [1])
    assert len(data) < HELLO_LIMIT
    assert read_client_hello(data).server_name.startswith("aaa")
    with pytest.raises(NotHello, match=f"in {HELLO_LIMIT} bytes"):
        read_client_hello(reframe(b"\x01\x00\xff\xff" + bytes(12000), [1]))


# --- the verdict -------------------------------------------------------------------------------


def hello(name, ech=False):
    return ClientHello(name, ech, 1)


@pytest.mark.parametrize(
    ("name", "host", "ok"),
    [
        ("allowed.test", "allowed.test", True),
        ("ALLOWED.test.", "allowed.test", True),
        ("other.test", "allowed.test", False),
        ("allowed.test.evil", "allowed.test", False),
        ("sub.allowed.test", "allowed.test", False),
        ("allowed.tes", "allowed.test", False),
        (None, "allowed.test", False),
        (None, "127.0.0.1", True),
        (None, "::1", True),
        ("allowed.test", "127.0.0.1", False),
        ("127.0.0.1", "127.0.0.1", True),
    ],
)
def test_verdict(name, host, ok):
    assert (verdict(hello(name), host) is None) is ok


def test_the_refusal_names_both_names():
    why = verdict(hello("other.test"), "allowed.test")
    assert "'other.test'" in why
    assert "allowed.test" in why
    assert "no SNI" in verdict(hello(None), "allowed.test")


@pytest.mark.parametrize("kind", [0xFE0D, 0xFFCE])
def test_encrypted_client_hello_is_refused(kind):
    ext = [(0, vec(2, b"\x00" + vec(2, b"allowed.test"))), (kind, b"\x00\x01\x02")]
    parsed = read_client_hello(reframe(build_hello(extensions=ext), [999]))
    assert parsed.ech
    assert "Encrypted Client Hello" in verdict(parsed, "allowed.test")


# --- fuzzing -----------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=600))
def test_fuzz_raw_bytes_raise_only_not_hello(data):
    for candidate in (data, b"\x16\x03\x01" + data, reframe(data or b"\x01", [len(data) or 1])):
        with contextlib.suppress(NotHello):
            read_client_hello(candidate)


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=8), st.integers(0, 10_000), st.integers(0, 255))
def test_fuzz_mutated_real_hellos(insert, where, flip):
    records = bytearray(REAL)
    at = where % len(records)
    records[at] ^= flip
    for candidate in (bytes(records), bytes(records[:at]) + insert + bytes(records[at:])):
        try:
            parsed = read_client_hello(candidate)
        except NotHello:
            continue
        assert parsed is None or parsed.size <= len(candidate)


REAL = real_hello("allowed.test")

_LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_LABEL, min_size=1, max_size=4).map(".".join),
    st.lists(st.integers(1, 300), min_size=1, max_size=5),
)
def test_fuzz_any_name_any_split_reads_back(name, sizes):
    records = reframe(build_hello(name.encode()), sizes)
    parsed = read_client_hello(records)
    assert parsed == ClientHello(name, False, len(records))
    assert verdict(parsed, name) is None
    assert verdict(parsed, "x" + name) is not None


def test_the_network_page_quotes_the_sni_refusal():
    from pathlib import Path

    page = Path(__file__).parents[2] / "docs" / "network.md"
    text = " ".join(page.read_text().split())
    assert verdict(hello("other.test"), "allowed.test") in text.replace("`", "")


# --- a second ClientHello (HelloRetryRequest) ---------------------------------------------------

HRR = reframe(b"\x02\x00\x00\x30\x03\x03" + HRR_RANDOM + bytes(14), [999], b"\x03\x03")
SERVER_HELLO = reframe(b"\x02\x00\x00\x30\x03\x03" + bytes(32) + bytes(14), [999], b"\x03\x03")
CCS = b"\x14\x03\x03\x00\x01\x01"
EARLY = b"\x17\x03\x03\x00\x05early"


def test_before_the_server_answers_only_ccs_alerts_and_early_data_pass():
    watch = HandshakeWatch("allowed.test")
    assert watch.up(CCS + EARLY) == CCS + EARLY
    with pytest.raises(NotHello, match="before the server answered"):
        watch.up(reframe(build_hello(b"other.test"), [999]))
    with pytest.raises(NotHello, match="type 24"):
        HandshakeWatch("allowed.test").up(b"\x18\x03\x03\x00\x01x")


@pytest.mark.parametrize("step", [1, 7, 1000])
def test_after_a_retry_request_the_second_hello_must_name_the_host(step):
    watch = HandshakeWatch("allowed.test")
    for at in range(0, len(HRR), step):
        watch.down(HRR[at : at + step])
    assert not watch.done
    second = reframe(build_hello(b"other.test"), [40])
    with pytest.raises(NotHello, match=r"second ClientHello.*'other\.test'"):
        for at in range(0, len(second), step):
            watch.up(second[at : at + step])


@pytest.mark.parametrize("step", [1, 7, 1000])
def test_after_a_retry_request_the_same_name_passes_and_the_watch_ends(step):
    watch = HandshakeWatch("allowed.test")
    watch.down(HRR)
    second = CCS + reframe(build_hello(), [40])
    passed = b""
    for at in range(0, len(second), step):
        passed += watch.up(second[at : at + step])
    assert passed == second
    assert watch.idle
    assert watch.up(b"\x16anything") == b"\x16anything"


def test_a_partial_second_hello_is_held_back():
    watch = HandshakeWatch("allowed.test")
    watch.down(HRR)
    second = reframe(build_hello(b"other.test"), [9999])
    assert watch.up(second[:-1]) == b""  # nothing of it goes up until it is whole and checked
    with pytest.raises(NotHello):
        watch.up(second[-1:])


def test_a_plain_server_hello_ends_the_watch():
    watch = HandshakeWatch("allowed.test")
    watch.down(SERVER_HELLO)
    assert watch.idle
    encrypted = b"\x16\x03\x03\x00\x04\x01\x02\x03\x04"  # TLS 1.2 Finished: encrypted, opaque
    assert watch.up(encrypted) == encrypted


def test_a_server_that_is_not_tls_ends_the_watch():
    watch = HandshakeWatch("allowed.test")
    watch.down(b"220 smtp ready\r\n")
    assert watch.idle


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.binary(max_size=80)), max_size=8))
def test_fuzz_the_watch_raises_only_not_hello(steps):
    watch = HandshakeWatch("allowed.test")
    sent, passed = b"", b""
    for is_up, data in steps:
        try:
            if is_up:
                sent += data
                passed += watch.up(data)
            else:
                watch.down(data)
        except NotHello:
            return
        assert sent.startswith(passed)  # the watch holds bytes back, never changes them
