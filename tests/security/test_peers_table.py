"""The table in docs/peers.md lists every ported peer case, with the verdicts the tests hold.

Each ``test_peers_*.py`` module has a ``PEERS`` table; this module checks that each entry
names a real test (and parameter), that a ``gap`` verdict is pinned by the ``gap`` marker
(and only then), and that the page's table is exactly what ``render()`` makes of them.
Regenerate the page's table after a change with
``STOCKADE_WRITE_PEERS_TABLE=1 uv run --locked pytest tests/security/test_peers_table.py``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from . import (
    test_peers_codex,
    test_peers_codex_proxy,
    test_peers_srt_deny,
    test_peers_srt_integration,
    test_peers_srt_net,
)

MODULES = (
    test_peers_codex,
    test_peers_codex_proxy,
    test_peers_srt_integration,
    test_peers_srt_net,
    test_peers_srt_deny,
)
BACKENDS = ("bubblewrap", "landlock")
PAGE = Path(__file__).parents[2] / "docs" / "peers.md"
START, END = "<!-- peers-table:start -->", "<!-- peers-table:end -->"


def cases() -> list[tuple[str, str, str, str, str]]:
    """Every ported case: (peer source, peer test, our test, bubblewrap, Landlock)."""
    rows = []
    for module in MODULES:
        for test, (source, peer, bwrap, landlock) in module.PEERS.items():
            rows.append(
                (source, peer, f"{module.__name__.rsplit('.', 1)[-1]}::{test}", bwrap, landlock)
            )
    return rows


def _cell(verdict: str) -> str:
    return verdict.replace("|", "\\|")


def render() -> str:
    """The Markdown the page holds between its markers: counts, then one row per case."""
    rows = cases()
    lines = ["| | bubblewrap | Landlock |", "|---|---|---|"]
    for label, prefix in (
        ("pass", "pass"),
        ("differs by design", "differs:"),
        ("real gap", "gap:"),
    ):
        counts = [sum(row[3 + i].startswith(prefix) for row in rows) for i in range(2)]
        lines.append(f"| {label} | {counts[0]} | {counts[1]} |")
    lines.append(f"| **cases** | {len(rows)} | {len(rows)} |")
    lines += [
        "",
        "| Peer case | Source | Stockade test | bubblewrap | Landlock |",
        "|---|---|---|---|---|",
    ]
    for source, peer, test, bwrap, landlock in rows:
        lines.append(f"| {peer} | `{source}` | `{test}` | {_cell(bwrap)} | {_cell(landlock)} |")
    return "\n".join(lines)


def _page_table() -> str:
    text = PAGE.read_text()
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def test_every_entry_names_a_test_and_every_test_has_an_entry():
    for module in MODULES:
        tests = {name for name in vars(module) if name.startswith("test_")}
        named = {key.split("[", 1)[0] for key in module.PEERS}
        assert named == tests, (module.__name__, named ^ tests)
        for key in module.PEERS:
            if "[" not in key:
                continue
            name, param = key[:-1].split("[", 1)
            marks = getattr(getattr(module, name), "pytestmark", [])
            params = {str(v) for m in marks if m.name == "parametrize" for v in m.args[1]}
            assert param in params, (key, params)


def test_verdicts_are_well_formed_and_gaps_are_pinned():
    for module in MODULES:
        for key, (_source, _peer, *verdicts) in module.PEERS.items():
            func = getattr(module, key.split("[", 1)[0])
            gaps = {m.args[0] for m in getattr(func, "pytestmark", []) if m.name == "gap"}
            for backend, verdict in zip(BACKENDS, verdicts, strict=True):
                assert verdict == "pass" or re.match(r"(differs|gap): \S", verdict), (key, verdict)
                assert verdict.startswith("gap:") == (backend in gaps), (key, backend)


def test_the_page_lists_every_case():
    if os.environ.get("STOCKADE_WRITE_PEERS_TABLE") == "1":  # the one way to regenerate it
        head, rest = PAGE.read_text().split(START, 1)
        PAGE.write_text(f"{head}{START}\n{render()}\n{END}{rest.split(END, 1)[1]}")
    assert _page_table() == render(), "regenerate: STOCKADE_WRITE_PEERS_TABLE=1 pytest this test"
