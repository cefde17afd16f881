"""The events a recorder sees, paired by ``action_id``, tagged by ``kind``, versioned.

Kept apart from :mod:`stockade.request.spec` so that a host without a recorder never pays for
building them: the host imports this module only when some plugin records.
"""

from __future__ import annotations

import hashlib
import time
from typing import Literal

from attrs import field, frozen

from ..request.literals import Mode, Origin, TaintKind
from ..request.result import Guarded, RunResult
from ..request.spec import ExecSpec
from ..request.verdict import Classification, Decision


def _now() -> float:
    return time.time()


@frozen
class ActionEvent:
    """A command was requested and resolved (recorded before anything runs).

    Attributes:
        action_id: pairs the events of one command.
        argv: the argv as requested.
        cwd: the resolved working directory.
        mode: the effective sandbox mode.
        origin: who typed it.
        profile: the profile whose policy applies.
        run_id: the run it is a step of.
        step: its number in the run.
        env_names: the names in the child's environment (never the values).
        credentials: environment variable -> credential handle (never the secret).
        stdin_sha256: the digest of its stdin (``None`` when it has none).
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    argv: tuple[str, ...]
    cwd: str = field(kw_only=True)
    mode: Mode = field(kw_only=True)
    origin: Origin = field(kw_only=True)
    profile: str = field(kw_only=True)
    run_id: str = field(kw_only=True, default="")
    step: int = field(kw_only=True, default=0)
    env_names: tuple[str, ...] = field(kw_only=True, default=())
    credentials: dict[str, str] = field(kw_only=True, factory=dict)
    stdin_sha256: str | None = field(kw_only=True, default=None)
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["action"] = field(kw_only=True, default="action")

    @classmethod
    def of(cls, spec: ExecSpec) -> ActionEvent:
        """The action event for a resolved command."""
        return cls(
            spec.action_id,
            spec.argv,
            cwd=spec.cwd,
            mode=spec.mode,
            origin=spec.origin,
            profile=spec.profile,
            run_id=spec.run_id,
            step=spec.step,
            env_names=tuple(sorted(spec.env)),
            credentials=dict(spec.credentials),
            stdin_sha256=hashlib.sha256(spec.stdin).hexdigest() if spec.stdin else None,
        )


@frozen
class PermissionEvent:
    """The decision that admitted, held or refused a command.

    Attributes:
        action_id: pairs the events of one command.
        classification: what it was judged to affect.
        decision: the final decision.
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    classification: Classification
    decision: Decision = field(kw_only=True)
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["permission"] = field(kw_only=True, default="permission")


@frozen
class ResultEvent:
    """How a command ended: the whole result, kept text and digests of both streams.

    Attributes:
        action_id: pairs the events of one command.
        result: the full result.
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    result: RunResult
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["result"] = field(kw_only=True, default="result")


@frozen
class ErrorEvent:
    """A command that was allowed but could not run: no credential, no sandbox, no spawn.

    Attributes:
        action_id: pairs the events of one command.
        code: the error's machine-readable code.
        message: the error's message.
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    code: str
    message: str = field(kw_only=True)
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["error"] = field(kw_only=True, default="error")


@frozen
class GrantEvent:
    """A one-shot widening of one command's sandbox, granted by a person.

    Attributes:
        action_id: the command it widens (and only that one).
        writable: folders writable for it beyond its workspace.
        by: who granted it.
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    writable: tuple[str, ...] = field(kw_only=True)
    by: str = field(kw_only=True)
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["grant"] = field(kw_only=True, default="grant")


@frozen
class ConnectionEvent:
    """A connection a ``network`` command asked its egress proxy for, allowed or refused.

    Attributes:
        action_id: the command that asked.
        host: the host it named.
        port: the port it named.
        allowed: whether the proxy let it through.
        reason: the rule that decided.
        method: ``CONNECT``, or the method of a plain HTTP request.
        bytes_up: bytes from the command to the host.
        bytes_down: bytes from the host to the command.
        time: seconds since the epoch (when the connection ended).
        version: the record format version.
    """

    action_id: str
    host: str = field(kw_only=True)
    port: int = field(kw_only=True)
    allowed: bool = field(kw_only=True)
    reason: str = field(kw_only=True)
    method: str = field(kw_only=True)
    bytes_up: int = field(kw_only=True, default=0)
    bytes_down: int = field(kw_only=True, default=0)
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["connection"] = field(kw_only=True, default="connection")


@frozen
class WorkspaceEvent:
    """A person acted on an agent's workspace outside any command (``stockade workspace``).

    Attributes:
        action_id: this action's own id.
        agent: the agent profile whose workspace it is.
        path: the workspace folder.
        action: what was done (``clear``).
        by: who did it.
        removed: how many entries were removed.
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    agent: str = field(kw_only=True)
    path: str = field(kw_only=True)
    action: Literal["clear"] = field(kw_only=True)
    by: str = field(kw_only=True)
    removed: int = field(kw_only=True, default=0)
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["workspace"] = field(kw_only=True, default="workspace")


@frozen
class QuarantineEvent:
    """Protected paths a command made or changed, dealt with after it exited.

    Attributes:
        action_id: the command that made or changed them.
        quarantined: the paths moved out of the workspace, as they were named there.
        restored: the protected paths put back as they were before the command ran.
        folder: where the quarantined paths went: this folder plus each original path.
        failed: paths that could be neither moved nor put back, with why.
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    quarantined: tuple[str, ...] = field(kw_only=True, default=())
    restored: tuple[str, ...] = field(kw_only=True, default=())
    folder: str | None = field(kw_only=True, default=None)
    failed: tuple[str, ...] = field(kw_only=True, default=())
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["quarantine"] = field(kw_only=True, default="quarantine")

    @classmethod
    def of(cls, action_id: str, guarded: Guarded) -> QuarantineEvent:
        """The event for what the check after a command did."""
        return cls(
            action_id,
            quarantined=guarded.quarantined,
            restored=guarded.restored,
            folder=guarded.folder,
            failed=guarded.failed,
        )


@frozen
class DeclineEvent:
    """A person (or a rule acting for none) declined a held step: it never runs.

    Attributes:
        action_id: the held command.
        by: who declined it (``alice (stockade decline)``, ``mcp-elicitation:...``).
        reason: how it was declined, in words (``declined``, ``cancelled``, ``expired``...).
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    by: str = field(kw_only=True)
    reason: str = field(kw_only=True, default="declined")
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["decline"] = field(kw_only=True, default="decline")


@frozen
class PlacementEvent:
    """Where a step was carried out, when that is not the deciding process: the node and
    the worker a driver shipped it to (``stockade-ray``), recorded before it is shipped.

    Attributes:
        action_id: the step's command.
        node: the node that carries it out (the cluster's node id).
        actor: the worker (the cluster's actor id).
        hostname: the node's host name, for people.
        inputs: the input files handed to it, each path's sha256.
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    node: str = field(kw_only=True)
    actor: str = field(kw_only=True)
    hostname: str = field(kw_only=True, default="")
    inputs: dict[str, str] = field(kw_only=True, factory=dict)
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["placement"] = field(kw_only=True, default="placement")


@frozen
class TaintEvent:
    """A run came to hold private data or somebody else's words (:mod:`stockade.policy.breaker`).

    Attributes:
        action_id: the step that caused it, or the file tool call's own id.
        taint: ``private`` (private data) or ``untrusted`` (somebody else's words).
        source: what caused it: ``credential``, ``private-path``, ``private-file`` (a file an
            earlier run marked), ``file_read``, ``file_list``, ``skill``, ``output``,
            ``network``.
        detail: which one, in words: the path, the variable and handle, the command.
        run_id: the run that holds it.
        step: the step that caused it (for a file tool: the run's last step before it).
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    taint: TaintKind = field(kw_only=True)
    source: str = field(kw_only=True)
    detail: str = field(kw_only=True)
    run_id: str = field(kw_only=True)
    step: int = field(kw_only=True, default=0)
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["taint"] = field(kw_only=True, default="taint")


@frozen
class ConflictEvent:
    """A command's layer changed paths that others changed since it started: its versions
    were kept aside (the quarantine's ``conflicts`` folder), never mixed in.

    Attributes:
        action_id: the command whose versions were kept aside.
        paths: the paths in conflict.
        rivals: the commands whose landing changed them first (empty: another program).
        folder: where its versions went: this folder, ``conflicts``, then each path.
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    paths: tuple[str, ...] = field(kw_only=True)
    rivals: tuple[str, ...] = field(kw_only=True, default=())
    folder: str | None = field(kw_only=True, default=None)
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["conflict"] = field(kw_only=True, default="conflict")


@frozen
class LayerEvent:
    """What became of a command's layers after its result: a starting host found them
    left by its predecessor (it was killed), or a person answered for them
    (``commit = "ask"``).

    Attributes:
        action_id: the command whose layers they were.
        outcome: ``finished`` (its commit had begun: landed to the end), ``discarded``
            (the command had not ended: nothing of it landed), ``landed`` (a person let
            them land) or ``refused`` (a person did not: nothing of it landed).
        roots: the writable roots its layers covered.
        changed: the paths that landing created, changed or deleted.
        quarantined: protected names landing sent to the quarantine.
        failed: what could not be done, with why (a conflict: kept aside).
        by: who answered (``landed``, ``refused``).
        reason: what they said, or how they were asked.
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    outcome: Literal["finished", "discarded", "landed", "refused"] = field(kw_only=True)
    roots: tuple[str, ...] = field(kw_only=True, default=())
    changed: tuple[str, ...] = field(kw_only=True, default=())
    quarantined: tuple[str, ...] = field(kw_only=True, default=())
    failed: tuple[str, ...] = field(kw_only=True, default=())
    by: str = field(kw_only=True, default="")
    reason: str = field(kw_only=True, default="")
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["layer"] = field(kw_only=True, default="layer")


@frozen
class AnnotationEvent:
    """A verdict on a run, given after its steps: a reward, a grader's score or pass
    (``stockade-ray``'s ``Episode.annotate``), so an eval's scores are signed with its commands.

    Attributes:
        action_id: the annotation's own id.
        run_id: the run it is about.
        step: the run's last step when it was given.
        name: what is judged (``reward``, ``tests``, a grader's name).
        score: a number, when the verdict is one.
        verdict: a word, when it is one (``pass``, ``fail``).
        detail: anything more, in words.
        by: who or what gave it.
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    run_id: str = field(kw_only=True)
    step: int = field(kw_only=True, default=0)
    name: str = field(kw_only=True)
    score: float | None = field(kw_only=True, default=None)
    verdict: str = field(kw_only=True, default="")
    detail: str = field(kw_only=True, default="")
    by: str = field(kw_only=True, default="")
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["annotation"] = field(kw_only=True, default="annotation")


@frozen
class AnchorEvent:
    """The head of a shard chain, anchored in this one (:mod:`stockade.record.shards`): the
    shard's events up to ``seq`` are then as safe as this chain.

    Attributes:
        action_id: the anchor's own id.
        shard: the shard's name (its store is ``shards/NAME/store.db`` beside this one).
        seq: the shard's last event when anchored.
        hash: that event's hash.
        public_key: the key the shard is signed with (hex).
        time: seconds since the epoch.
        version: the record format version.
    """

    action_id: str
    shard: str = field(kw_only=True)
    seq: int = field(kw_only=True)
    hash: str = field(kw_only=True)
    public_key: str = field(kw_only=True)
    time: float = field(kw_only=True, factory=_now)
    version: int = field(kw_only=True, default=1)
    kind: Literal["anchor"] = field(kw_only=True, default="anchor")


Event = (
    ActionEvent
    | PermissionEvent
    | GrantEvent
    | ConnectionEvent
    | ResultEvent
    | ErrorEvent
    | WorkspaceEvent
    | QuarantineEvent
    | DeclineEvent
    | PlacementEvent
    | TaintEvent
    | LayerEvent
    | ConflictEvent
    | AnnotationEvent
    | AnchorEvent
)
"""Everything a recorder sees, tagged by its ``kind`` field."""
