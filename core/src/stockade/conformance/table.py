"""The kit's verdict, promise by promise: a Markdown table a backend author can paste.

One table per provider. A promise's result is ``pass`` (every attack on it held),
``FAIL`` (an attack got through, or a pinned gap no longer fails: remove the pin),
``pinned`` (every attack failed as the provider's :class:`~stockade.confine.promises.Gap`
says), ``not declared`` (an extra promise the provider does not make), ``skipped`` (every
attack on it cannot arise here: as root, say) or ``not run`` (none was selected).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..confine.promises import CORE, Promise, pins
from ..confine.provider import SandboxProvider

PINNED = "pinned gap: "
"""How the reason of a pinned gap's expected failure begins."""


class Outcomes:
    """Each attack's outcome, by provider and promise."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[str, dict[str, str]]] = {}

    def add(self, sandbox: str, promise: str, nodeid: str, outcome: str, xfail: str | None) -> None:
        """Record one report of a case: pytest's ``outcome`` and, for an expected failure,
        its reason ``xfail``. The case is then ``passed``, ``failed``, ``pinned`` (a pinned
        gap failed as expected) or ``skipped``. Its worst outcome stands (a failed teardown
        after a pass)."""
        if outcome == "skipped" and xfail is not None:
            # a pinned gap, or a case that cannot arise here (``pytest.xfail`` in the test)
            outcome = "pinned" if xfail.startswith(PINNED) else "skipped"
        cases = self._seen.setdefault(sandbox, {}).setdefault(promise, {})
        if cases.get(nodeid) != "failed":
            cases[nodeid] = outcome

    def sandboxes(self) -> list[str]:
        """The providers attacked, in the order first seen."""
        return list(self._seen)

    def of(self, sandbox: str, promise: str) -> dict[str, str]:
        """Node id -> outcome of every attack on ``promise`` against ``sandbox``."""
        return dict(self._seen.get(sandbox, {}).get(promise, {}))

    def failed(self, sandbox: str) -> list[str]:
        """The promises of ``sandbox`` with a failed attack, in table order."""
        return [p.value for p in Promise if "failed" in self.of(sandbox, p.value).values()]


def verdict(
    cases: Mapping[str, str], pinned: str | None, *, declared: bool = True
) -> tuple[str, str]:
    """A promise's result and its reason, from its cases' outcomes; ``declared`` is false
    for an extra promise the provider neither declares nor pins."""
    failed = sorted(node.rpartition("::")[2] for node, out in cases.items() if out == "failed")
    ran = [out for out in cases.values() if out != "skipped"]
    if failed:
        why = "pinned gap now holds, remove the pin: " if pinned else ""
        return "FAIL", why + ", ".join(failed)
    if not ran:
        if not cases:
            return "not run", ""
        return ("skipped", "cannot arise here") if declared else ("not declared", "")
    if pinned is not None and all(out == "pinned" for out in ran):
        return "pinned", pinned
    return "pass", f"{len(ran)} attack{'s' if len(ran) != 1 else ''}"


def render(outcomes: Outcomes, providers: Mapping[str, type[SandboxProvider]]) -> str:
    """One Markdown table per provider, then a line naming the failed promises."""
    lines: list[str] = []
    for sandbox in outcomes.sandboxes():
        cls = providers.get(sandbox)
        gaps = pins(cls.GAPS) if cls else {}
        lines += [
            f"Stockade conformance: {sandbox}",
            "",
            "| promise | kind | result | reason |",
            "|---|---|---|---|",
        ]
        for promise in Promise:
            cases = outcomes.of(sandbox, promise.value)
            declared = cls is None or promise in CORE or promise in cls.PROMISES
            result, reason = verdict(cases, gaps.get(promise), declared=declared)
            kind = "core" if promise in CORE else "extra"
            lines.append(f"| {promise.value} | {kind} | {result} | {reason} |")
        failed = outcomes.failed(sandbox)
        lines += [
            "",
            f"{sandbox}: FAILED {', '.join(failed)}"
            if failed
            else f"{sandbox}: every promise attacked held, or failed as pinned",
            "",
        ]
    return "\n".join(lines).rstrip()
