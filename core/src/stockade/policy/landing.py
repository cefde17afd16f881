"""Whether a command's writes land, when its profile says ``commit = "ask"``.

The command ran in its layers and its result is recorded with ``landed = "waiting"``
(:mod:`stockade.layers.waiting`): nothing of it is in the real folder. The host then asks a
person through the same seam as a held command (the ``stockade_ask`` hook, with the change
list on :class:`~stockade.request.result.PendingApproval`): at the terminal for a CLI
command, the server's caller's terminal through the warm server. Their answer lands the
layers or discards them, and is recorded as a ``layer`` event naming who answered. Nobody
to ask (no terminal, MCP, a background task): the layers wait for ``stockade land``.
``--yes`` (a preapproved command) approves the command, never its landing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ..layers import waiting
from ..request.result import PendingApproval
from ..request.verdict import Decision

if TYPE_CHECKING:
    from ..plugin.manager import Hooks
    from ..record.recording import Recording
    from ..request.result import RunResult
    from ..request.spec import ExecSpec

BY = "commit"
REASON = "commit = ask: its writes land only when a person lets them"


def ask(hooks: Hooks, recording: Recording, spec: ExecSpec, result: RunResult) -> RunResult:
    """``result``, its waiting layers landed or refused by a person's answer; as it was when
    nobody could answer (they wait for ``stockade land``)."""
    if result.landed != "waiting" or spec.layer_store is None:
        return result
    shown = Decision("ask", REASON, by=BY)
    answer = hooks.ask(PendingApproval(spec, result.classification, shown, changes=result.changes))
    if answer is None or answer.verdict == "ask":
        return result
    approve = answer.verdict == "allow"
    return answered(
        recording, spec.layer_store, result, approve=approve, by=answer.by, reason=answer.reason
    )


def answered(
    recording: Recording,
    store: str,
    result: RunResult,
    *,
    approve: bool,
    by: str,
    reason: str = "",
) -> RunResult:
    """Land (``approve``) or refuse ``result``'s waiting layers, recorded as ``by``'s answer.

    Raises:
        UsageError: they no longer wait (somebody answered first).
        RecorderFailed: the answer was carried out but not recorded.
    """
    event, tally = waiting.settle(store, result.action_id, land_it=approve, by=by, reason=reason)
    recording.record(event)
    if not approve:
        return attrs.evolve(result, landed="refused")
    return attrs.evolve(
        result,
        landed="landed",
        quarantined=tuple(tally.quarantined),
        conflicts=tuple(tally.conflicts),
    )
