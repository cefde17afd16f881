"""What a command came to: its output, its outcome, its changes, refused connections, the
result; and a step held for a person."""

from __future__ import annotations

from attrs import field, frozen

from .checks import _strings
from .literals import ChangeMethod, Landed, LimitName
from .plan import SandboxFacts
from .spec import ExecSpec, Limits
from .verdict import Classification, Decision


@frozen
class Guarded:
    """What the check after a run did.

    Attributes:
        quarantined: the paths moved out of the workspace (as they were named there).
        restored: the protected paths put back as they were before the run.
        folder: where the quarantined paths went (``None`` when nothing was moved).
        failed: paths that could be neither moved nor put back, with why.
        conflicts: paths its layer changed that another command (or a person) changed too
            since it started: its version went to ``folder/conflicts/`` instead of landing.
        rivals: the commands (action ids) whose landing changed those paths, when this
            process landed them (another program's change names none).
    """

    quarantined: tuple[str, ...] = ()
    restored: tuple[str, ...] = ()
    folder: str | None = None
    failed: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    rivals: tuple[str, ...] = ()


@frozen
class CollectedOutput:
    """One captured stream: the kept text plus what is needed to recover the rest.

    Attributes:
        text: the stream decoded as UTF-8; when truncated, head and tail with the middle marked.
        truncated: bytes were dropped from :attr:`text`.
        total_bytes: the length of the whole stream.
        sha256: hex digest of the whole stream.
        spill_path: a private file holding the whole stream, when truncated, or when it is
            not UTF-8 (:attr:`text` then shows U+FFFD where its bytes were).
    """

    text: str
    truncated: bool
    total_bytes: int = field(kw_only=True)
    sha256: str = field(kw_only=True)
    spill_path: str | None = field(kw_only=True, default=None)


@frozen
class ProcessOutcome:
    """What an executor observed: how the process ended and what it printed.

    Attributes:
        exit_code: the exit status; ``None`` when a signal killed the process.
        signal: the name of the signal that killed it (``SIGKILL``), or ``None``.
        timed_out: the executor's timeout fired.
        aborted: the caller cancelled the run.
        duration: seconds from spawn to exit.
        stdout: the captured standard output.
        stderr: the captured standard error.
        limit_hit: the resource limit that most likely ended the run, if one did.
        guarded: what the host's check after the run quarantined and restored, when it
            did anything (:mod:`stockade.run.guard`).
        landed: what became of its layers, when it wrote into layers (:mod:`stockade.layers`).
    """

    exit_code: int | None
    signal: str | None
    timed_out: bool = field(kw_only=True)
    aborted: bool = field(kw_only=True)
    duration: float = field(kw_only=True)
    stdout: CollectedOutput = field(kw_only=True)
    stderr: CollectedOutput = field(kw_only=True)
    limit_hit: LimitName | None = field(kw_only=True, default=None)
    guarded: Guarded | None = field(kw_only=True, default=None)
    landed: Landed | None = field(kw_only=True, default=None)


@frozen
class Changes:
    """What changed in the workspace while a command ran, by path relative to it.

    Directories end in ``/``. A created directory lists everything in it too; a deleted
    one everything it held. Each list is sorted; together they hold at most ``limit``
    entries, and :attr:`total` always counts them all.

    Attributes:
        created: paths that did not exist before the command.
        modified: paths that existed before and after, whose content or metadata was
            written (a file replaced by a rename counts as modified).
        deleted: paths that existed before and are gone.
        total: how many entries the three lists would hold without the cap.
        truncated: entries were left out of the lists (``total`` is larger than their sum).
        method: ``inotify`` (the kernel reported every change) or ``scan`` (it could not,
            so the tree was listed again and compared; modifications are then read from
            change times), or ``layer`` (the command's layer is the list).
        withheld: of a layer that has not landed (a dry run, a landing waiting for a
            person): the protected names it made or changed, which landing would send to
            the quarantine (absolute paths; folders end in ``/``).
        conflicts: of such a layer: the paths it changed that were changed in the real
            folder since it started, which landing would keep aside (absolute paths).
    """

    created: tuple[str, ...] = field(default=(), converter=_strings)
    modified: tuple[str, ...] = field(default=(), converter=_strings)
    deleted: tuple[str, ...] = field(default=(), converter=_strings)
    total: int = field(kw_only=True, default=0)
    truncated: bool = field(kw_only=True, default=False)
    method: ChangeMethod = field(kw_only=True, default="inotify")
    withheld: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    conflicts: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)


@frozen
class Refusal:
    """A connection the egress proxy refused a command, as a person needs to see it.

    Attributes:
        host: the host the command named.
        port: the port it named.
        method: ``CONNECT``, or the method of a plain HTTP request.
        reason: the rule that refused it.
    """

    host: str
    port: int
    method: str = field(kw_only=True)
    reason: str = field(kw_only=True)


@frozen
class RunResult:
    """The structured result of one command.

    Attributes:
        action_id: pairs this result with its recorded events.
        argv: the argv as requested.
        exit_code: the exit status; ``None`` when a signal killed the process.
        signal: the name of the killing signal, or ``None``.
        timed_out: Stockade's timeout fired (even if the command then exited 0).
        aborted: the caller cancelled the run.
        duration_ms: milliseconds from spawn to exit.
        timeout_s: the effective timeout that applied.
        stdout: the captured standard output.
        stderr: the captured standard error.
        sandbox: how the command was confined.
        limits: the resource limits that applied.
        limit_hit: the limit that most likely ended the run (``memory``, ``processes``,
            ``file_size``, ``cpu``), read from the signal or stderr: a hint, like ``denied``;
            ``quota`` (not a hint) when the host stopped it for taking its workspace over
            the profile's ``quota_mb``.
        classification: what the command was judged to affect.
        decision: why it was allowed.
        changes: what it created, modified and deleted in its workspace; ``None`` when
            nothing was watched (a ``read-only`` command, which cannot change it, or a
            workspace too big to watch).
        refused: the connections the egress proxy refused it (each is also a
            ``connection`` event in the record), so a person sees why a network step failed.
        cwd: the directory it ran in (an agent's own workspace, when the caller named none).
        quarantined: protected names (``.git``, agent config, dotfiles, credential stores,
            ...) the command made, or changed inside a protected path, moved out of the
            workspace into the store's quarantine after it exited.
        restored: protected paths it changed, put back as they were before it ran (under a
            sandbox that cannot keep them read-only while it runs: Landlock).
        landed: under layers (``sandbox.writes = "layered"``): ``landed`` (its writes reached
            the real folder, less protected names), ``discarded`` (a dry run, or ``commit =
            "on-success"`` and it failed: ``changes`` lists what would have changed) or
            ``over-quota`` (landing would take the workspace past its quota: nothing landed),
            ``waiting`` (``commit = "ask"`` and nobody has answered yet: ``stockade land``)
            or ``refused`` (a person did not let it land). ``None`` when it wrote directly.
        conflicts: paths its layer changed that another command (or a person) changed
            since it started: its versions were kept aside in the quarantine's
            ``conflicts`` folder, never mixed in (a ``conflict`` event names the other side).
    """

    action_id: str
    argv: tuple[str, ...]
    exit_code: int | None = field(kw_only=True)
    signal: str | None = field(kw_only=True)
    timed_out: bool = field(kw_only=True)
    aborted: bool = field(kw_only=True)
    duration_ms: float = field(kw_only=True)
    timeout_s: float = field(kw_only=True)
    stdout: CollectedOutput = field(kw_only=True)
    stderr: CollectedOutput = field(kw_only=True)
    sandbox: SandboxFacts = field(kw_only=True)
    classification: Classification = field(kw_only=True)
    decision: Decision = field(kw_only=True)
    limits: Limits = field(kw_only=True, factory=Limits)
    limit_hit: LimitName | None = field(kw_only=True, default=None)
    changes: Changes | None = field(kw_only=True, default=None)
    refused: tuple[Refusal, ...] = field(kw_only=True, default=())
    cwd: str = field(kw_only=True, default="")
    quarantined: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    restored: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)
    landed: Landed | None = field(kw_only=True, default=None)
    conflicts: tuple[str, ...] = field(kw_only=True, default=(), converter=_strings)

    @property
    def ok(self) -> bool:
        """The command exited 0 on its own: not signalled, timed out or aborted."""
        return self.exit_code == 0 and not (self.timed_out or self.aborted)


@frozen
class PendingApproval:
    """A command waiting for a person: exactly what would run, and why it is held; or,
    with ``changes``, a command that ran whose writes wait to land (``commit = "ask"``).

    Attributes:
        spec: the resolved command (its ``run_id`` and ``step`` name it).
        classification: what it may affect.
        decision: the ``ask`` decision that held it.
        changes: what landing its layers would change (``None``: the command itself waits).
    """

    spec: ExecSpec
    classification: Classification
    decision: Decision
    changes: Changes | None = field(kw_only=True, default=None)
