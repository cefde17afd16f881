"""record.md tells the truth: it quotes what ``stockade verify`` says, and names every kind
of event."""

from __future__ import annotations

import re

from helpers.docs import DOCS, ROOT, section

# --- the record page ------------------------------------------------------------------------

RECORD_PAGE = DOCS / "record.md"


def test_the_record_page_quotes_what_verify_says():
    stockade = ROOT / "core" / "src" / "stockade"
    # One message may be split over adjacent literals: join them.
    checks = ("verify.py", "outputs.py", "integrity.py")  # verify's own, its blobs', the file's
    source = re.sub(
        r'"\s*\n\s*f?"',
        "",
        "".join((stockade / "record" / name).read_text(encoding="utf-8") for name in checks),
    )
    table = section(RECORD_PAGE, "## What `stockade verify` checks")
    quoted = re.findall(r"\| `([^`]+)`", table)
    assert len(quoted) == 19, quoted
    field = r"\{[^}]+\}"
    for message in quoted:
        # Capitals stand for values the code writes as f-string fields (the longer first).
        pattern = re.escape(message)
        for name in ("COLUMN", "STREAM", "DIGEST", "KIND", "NAME", "TYPE", "RUN"):
            pattern = pattern.replace(name, "\0")
        pattern = pattern.replace("N", field).replace("M", field).replace("\0", field)
        assert re.search(pattern.replace("1", f"(1|{field})", 1), source), message


def test_the_record_page_names_every_event_kind():
    import typing

    from stockade.record import events

    kinds = {
        cls.__attrs_attrs__.kind.default  # type: ignore[attr-defined]
        for cls in typing.get_args(events.Event)
    }
    table = section(RECORD_PAGE, "## The events")
    assert set(re.findall(r"^\| `(\w+)` \|", table, re.M)) == kinds
