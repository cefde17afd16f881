"""What of an injected secret the response mask finds: pieces of it in every stream it may
come back in, and base64 wrapped over lines, wherever the reads are cut."""

from __future__ import annotations

import base64

from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.egress.echoes import PIECE, Pieces, encodings
from stockade.egress.stream import Mask
from stockade.record.redact import secret_forms

SECRETS = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=PIECE, max_size=60
)
NOISE = st.binary(max_size=40)
B64 = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")


def masked(secret: str, data: bytes, cuts: list[int]) -> bytes:
    mask = Mask([f.encode() for f in secret_forms(secret)], encodings(secret), Pieces([secret]))
    out, at = b"", 0
    for cut in sorted({min(c, len(data)) for c in cuts}):
        out += mask.feed(data[at:cut])
        at = cut
    return out + mask.feed(data[at:]) + mask.flush()


def encoded(piece: bytes, how: str, lead: bytes) -> bytes:
    if how == "raw":
        return piece
    if how == "hex":
        return piece.hex().encode()
    if how == "HEX":
        return piece.hex().upper().encode()
    if how == "pct":
        return b"".join(b"%%%02X" % c for c in piece)
    if how == "b64":
        return base64.b64encode(lead + piece)
    return base64.urlsafe_b64encode(lead + piece)


@settings(max_examples=300, deadline=None)
@given(
    secret=SECRETS,
    data=st.data(),
    how=st.tuples(
        st.sampled_from(["raw", "hex", "HEX", "pct", "b64", "b64url"]),
        st.sampled_from([b"", b"a", b"ab"]),  # where base64 starts: each alignment
    ),
    around=st.tuples(NOISE, NOISE),
    cuts=st.lists(st.integers(0, 200), max_size=4),
)
def test_a_piece_of_the_secret_in_any_stream_is_masked(secret, data, how, around, cuts):
    raw = secret.encode()
    start = data.draw(st.integers(0, len(raw) - PIECE))
    end = data.draw(st.integers(start + PIECE, len(raw)))
    piece = raw[start:end]
    before, after = around
    how, lead = how
    sent = encoded(piece, how, lead)
    out = masked(secret, before + sent + after, cuts)
    assert len(out) == len(before + sent + after)  # lengths stay true
    assert sent not in out or sent in before + after
    if how.startswith("b64"):  # read back as base64, the piece is gone
        got = out[len(before) : len(before) + len(sent)].translate(bytes.maketrans(b"-_", b"+/"))
        got = bytes(c if c in B64 else ord("A") for c in got).rstrip(b"=")
        assert piece not in base64.b64decode(got[: len(got) // 4 * 4])


@settings(max_examples=200, deadline=None)
@given(
    secret=SECRETS,
    lead=st.binary(max_size=50),
    width=st.integers(4, 80),
    end=st.sampled_from([b"\n", b"\r\n", b"\\n", b"\\r\\n", b" "]),
    cuts=st.lists(st.integers(0, 400), max_size=4),
)
def test_base64_wrapped_over_lines_is_masked(secret, lead, width, end, cuts) -> None:
    text = base64.b64encode(lead + secret.encode() + b" tail")
    wrapped = end.join(text[i : i + width] for i in range(0, len(text), width))
    out = masked(secret, wrapped, cuts)
    joined = out.replace(end, b"")
    for form in secret_forms(secret):
        assert form.encode() not in joined or form.encode() in lead + b" tail"
    joined = bytes(c if c in B64 else ord("A") for c in joined).rstrip(b"=")
    decoded = base64.b64decode(joined[: len(joined) // 4 * 4])
    assert secret.encode() not in decoded


def test_a_piece_shorter_than_the_threshold_passes() -> None:
    """The limit, pinned: a run of PIECE - 1 bytes of the secret is not masked."""
    secret = "ghp_" + "k3Yq9ZxWv2" * 4
    short = secret[5 : 5 + PIECE - 1].encode()
    assert masked(secret, b"<" + short + b">", []) == b"<" + short + b">"
