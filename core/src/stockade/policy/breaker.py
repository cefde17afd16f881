"""The breaker: a run that holds private data and has read somebody else's words asks a
person before any step that can reach the network, and its egress proxy refuses every
connection made while the run holds both.

A run's *taints* come from facts the host already has; each is a ``taint`` event in the
signed record (:class:`~stockade.record.events.TaintEvent`) naming its source:

somebody else's words (``untrusted``)
    ``file_read`` / ``file_list``: a file tool of the run read or listed something;
    ``skill``: the skill tool gave a skill's instructions or a resource (:meth:`Breaker.words`);
    ``output``: a step's output came back; ``network``: a step classed ``network`` ran.
    ``output`` and ``network`` count once per run.
private data (``private``)
    ``credential``: a step asked for a credential (:func:`stockade.policy.credentials.used`);
    ``grant``: a step was granted the private paths (:meth:`Breaker.private`: hidden from
    every other step by its sandbox); ``private-path`` / ``private-file``: a file tool of the
    run, granted them, read a path the ``private`` globs match or the sidecar marks.

What a step can open decides, never how its argv spells a path: what argv names
(:func:`stockade.policy.named.named`) is only shown to the person the breaker asks.

The checks: :meth:`Breaker.admit` decides ``ask`` by ``breaker`` for a step classed
``network``, or run ``danger-full-access``, of a run holding both (a ``deny`` stays a deny; an
approval in advance does not answer it); :meth:`Breaker.at_connection` refuses, at the egress
proxy, a connection made while the run holds both, unless a person approved that step after
the run held both. Only the profile's ``breaker = "off-allow-exfiltration"`` turns both off;
the taints are recorded all the same. What a run writes after it holds private data is
marked in the sidecar, so the next run must be granted it too.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Literal

from .. import resolved
from ..errors import RecorderFailed
from ..request.verdict import Decision
from .named import matches, named, relative_to
from .taints import REFUSED, Taint, key, listed, reason, split

if TYPE_CHECKING:
    from ..config.schema import Config
    from ..record.recording import Recording
    from ..record.store import Store
    from ..record.taint import PrivateFiles
    from ..request.literals import TaintKind
    from ..request.result import RunResult
    from ..request.spec import ExecSpec, Profile
    from ..request.step import Agent, Carried
    from ..request.verdict import Classification
    from ..workspace.file_types import WriteResult

BY = "breaker"
"""Who decides the breaker's ``ask`` (``Decision.by``)."""
OPT_OUT = "off-allow-exfiltration"
"""The profile's ``breaker`` setting that turns the check off."""


class Breaker:
    """One run's taints, and the breaker's check of its steps.

    Args:
        recording: where its taints are recorded.
        store: the store (opened on first use): the record read back, the sidecar.
        run_id: the run.
        config: the configuration (``store.fail_closed``: whether a sidecar that cannot be
            read or written refuses the step, or is a warning).
    """

    def __init__(
        self, recording: Recording, store: Callable[[], Store], run_id: str, config: Config
    ) -> None:
        self.recording = recording
        self.run_id = run_id
        self.fail_closed = config.store.fail_closed
        self._config = config
        self._walks: str | None = None  # where what private globs matched is kept
        self._store = store
        self._files: PrivateFiles | None = None
        self._taints: dict[tuple[str, ...], Taint] = {}  # by key(), in order
        self._step = 0
        self._seen = 0  # the last event of the record read back (0: none yet)
        self._real: dict[str, str] = {}  # a workspace's real path, resolved once a run
        self._lock = threading.Lock()
        self.on_both: Callable[[str], None] | None = None
        """Told the breaker's reason once, in the thread that counted it, when this process
        counts the run coming to hold both kinds (a Ray pool tells its workers' proxies)."""
        self._both = False

    # --- what a run holds ----------------------------------------------------------------

    def holds(self) -> tuple[list[Taint], list[Taint]]:
        """Its private and untrusted taints: this process's, and what the record has of the
        run from other processes (a server before a restart, ``stockade file --run``, an
        approval)."""
        if self.recording.active:
            from ..record.taint import recorded

            found: list[tuple[str, str, str]] = []
            with self._stored():
                found, self._seen = recorded(self._store(), self.run_id, self._seen)
            with self._lock:
                for taint, source, detail in found:
                    kind: TaintKind = "private" if taint == "private" else "untrusted"
                    found_taint = Taint(kind, source, detail)
                    self._taints.setdefault(key(found_taint), found_taint)
                tell = self._newly_both()
            if tell is not None and self.on_both is not None:
                self.on_both(tell)  # another process's taint, seen now
        return self._held()

    def _holds_private(self, run_id: str | None = None) -> bool:
        """Whether the run (or ``run_id``: a held step of another run this host released)
        holds private data."""
        if run_id is not None and run_id != self.run_id:
            return bool(self._of(run_id)[0])
        with self._lock:
            if any(t.taint == "private" for t in self._taints.values()):
                return True
        return bool(self.holds()[0])

    # --- a command -----------------------------------------------------------------------

    def admit(
        self, spec: ExecSpec, classification: Classification, agent: Agent
    ) -> Decision | None:
        """Record the step's own taints (the credentials it asks for, the private paths it
        names); the breaker's ``ask`` when it trips, else ``None``.

        Raises:
            RecorderFailed: a taint could not be recorded (the step does not run).
        """
        from .credentials import bound, used

        with self._lock:
            self._step = max(self._step, spec.step)
        profile = agent.profile
        # Injected by the proxy or given in the environment, the run used it either way.
        hosts = {b.variable: f", injected for {b.binding.host}" for b in bound(profile, spec)}
        taints = [
            Taint("private", "credential", f"{variable} (handle {handle}{hosts.get(variable, '')})")
            for variable, handle in used(spec).items()
        ]
        self._add(taints, spec.action_id, spec.run_id, spec.step)
        tripped = self.check(spec, classification, agent.profile)
        if tripped is None:
            return None
        # Reading argv decides nothing; what it names is shown to the person asked.
        names = self._private(named(spec.argv, spec.cwd), spec.workspace, profile)
        if not names:
            return tripped
        return Decision("ask", f"{tripped.reason}; this step names {listed(names)}", by=BY)

    def private(self, spec: ExecSpec, agent: Agent) -> ExecSpec:
        """``spec`` with the private data it may not open (:mod:`stockade.policy.private`):
        every path the profile's ``private`` globs match under the workspace root (or
        absolute), every file the sidecar marks there. A step granted them sees them, and
        its run holds private data from now on (``grant``, recorded before its decision). A
        step of a run that holds private data already (its own credentials count) is granted
        them: seeing them adds nothing to what its run holds.

        Raises:
            UsageError: its working folder is private data it is not granted.
            RecorderFailed: the taint could not be recorded.
        """
        from .private import for_step

        profile = agent.profile
        marked: list[str] = []
        if profile.private or self.recording.active:
            with self._stored():
                marked = self.files().named(self._realpath(spec.workspace), [""])
        if not profile.private and not marked:
            return spec
        from .credentials import used

        held = bool(used(spec)) or self._holds_private(spec.run_id)
        real, walks = self._realpath(spec.workspace), self._memory()
        spec, granted = for_step(spec, profile, real, marked, held=held, memory=walks)
        if granted is not None:
            taint = Taint("private", "grant", granted)
            self._add([taint], spec.action_id, spec.run_id, spec.step)
        return spec

    def _memory(self) -> str | None:
        """The store's folder of what private globs matched (:mod:`stockade.policy.walk`),
        made once; ``None`` when it cannot be."""
        if self._walks is None:
            from ..config.schema import store_folder

            folder = os.path.join(store_folder(self._config), "walks")
            with contextlib.suppress(OSError):
                os.mkdir(folder, 0o700)  # only inside a store folder that exists
            self._walks = folder if os.path.isdir(folder) else ""
        return self._walks or None

    def file_read(self, root: str, path: str, profile: Profile, *, granted: bool) -> None:
        """Before a file tool reads ``path``: refused when it is private data (the globs, the
        sidecar's marks) and the tool is not ``granted`` it.

        Raises:
            PolicyDenied: it is private data, not granted.
        """
        from .private import find, refuse_read

        if granted:
            return
        real, marked = self._realpath(root), []
        with self._stored():
            marked = self.files().named(real, [""])
        if profile.private or marked:
            refuse_read(real, path, find(real, profile.private, marked))

    def check(
        self, spec: ExecSpec, classification: Classification, profile: Profile
    ) -> Decision | None:
        """The breaker's ``ask`` for a step that can reach the network, of a run that holds
        private data and somebody else's words; ``None`` for any other."""
        if profile.breaker == OPT_OUT:
            return None
        if classification.kind != "network" and spec.mode != "danger-full-access":
            return None
        private, untrusted = self.holds() if spec.run_id == self.run_id else self._of(spec.run_id)
        if not private or not untrusted:
            return None
        return Decision("ask", reason(private, untrusted), by=BY)

    def at_connection(self, run_id: str, profile: Profile, *, over_breaker: bool) -> str | None:
        """The check where bytes leave, asked by a step's egress proxy on each connection
        when it is made: the breaker's reason to refuse it when the run (``run_id``: the
        step's own) holds both kinds now, unless a person approved the step after the run
        held both (``over_breaker``) or the profile opts out; else ``None``. Whatever opens
        the connection (a task admitted while the run was clean, a program run by a
        program), the run's taint at that moment decides."""
        if over_breaker or profile.breaker == OPT_OUT:
            return None
        if run_id != self.run_id:
            private, untrusted = self._of(run_id)
        else:  # this process's count first; the record only when it does not hold both
            private, untrusted = self._held()
            if not private or not untrusted:
                private, untrusted = self.holds()
        if not private or not untrusted:
            return None
        return REFUSED + reason(private, untrusted)

    def both(self) -> str | None:
        """The breaker's reason when this process has counted the run holding both kinds,
        else ``None`` (the record is not read)."""
        private, untrusted = self._held()
        return reason(private, untrusted) if private and untrusted else None

    def _newly_both(self) -> str | None:
        """The reason, once, when the run has just come to hold both (the lock held)."""
        if self._both or self.on_both is None:
            return None
        private, untrusted = split(list(self._taints.values()))
        if not private or not untrusted:
            return None
        self._both = True
        return reason(private, untrusted)

    def _held(self) -> tuple[list[Taint], list[Taint]]:
        """What this process has counted of its run, without reading the record."""
        with self._lock:
            return split(list(self._taints.values()))

    def _of(self, run_id: str) -> tuple[list[Taint], list[Taint]]:
        """The taints of another run, read back from the record."""
        if not self.recording.active:
            return [], []
        from ..record.taint import recorded

        found: list[tuple[str, str, str]] = []
        with self._stored():
            found = recorded(self._store(), run_id)[0]
        taints = [Taint("private" if t == "private" else "untrusted", s, d) for t, s, d in found]
        return split(taints)

    def finish(
        self, spec: ExecSpec, carried: Carried, record: Callable[[Carried], RunResult]
    ) -> RunResult:
        """``record(carried)``, then what the step tainted its run with; the files it wrote
        while the run held private data are marked in the sidecar, the ones it deleted
        unmarked. Its taints count at once, before anything is recorded.

        Raises:
            RecorderFailed: the result or a taint could not be recorded (the result is on
                the error).
        """
        result = carried.result
        sources = []
        if result.stdout.total_bytes or result.stderr.total_bytes:
            sources.append("output")
        if result.classification.kind == "network":
            sources.append("network")
        with self._lock:  # counted once a run (ONCE): the command is shown only the first time
            ours = spec.run_id == self.run_id
            sources = [s for s in sources if not ours or ("untrusted", s) not in self._taints]
        taints = [Taint("untrusted", s, f"step {spec.step}: {_shown(spec.argv)}") for s in sources]
        new = self._count(taints, spec.run_id)
        recorded = record(carried)
        try:
            self._record(new, spec.action_id, spec.run_id, spec.step)
            if result.changes is not None:
                self._written(spec, result)
        except RecorderFailed as error:
            raise RecorderFailed(error.message, hint=error.hint, result=recorded) from error
        return recorded

    def _written(self, spec: ExecSpec, result: RunResult) -> None:
        changes = result.changes
        assert changes is not None  # noqa: S101 - checked by the caller
        written = [path.rstrip("/") for path in (*changes.created, *changes.modified)]
        private = bool(written) and self._holds_private(spec.run_id)
        if not changes.deleted and not private:
            return
        workspace = self._realpath(spec.workspace)
        with self._stored():
            files = self.files()
            if changes.deleted:
                files.forget(workspace, (path.rstrip("/") for path in changes.deleted))
            if private:
                files.mark(workspace, written, run_id=spec.run_id, step=spec.step)

    # --- a file tool ---------------------------------------------------------------------

    def file_tool(
        self,
        tool: Literal["list", "read", "write"],
        root: str,
        path: str,
        profile: Profile,
        *,
        written: WriteResult | None = None,
    ) -> None:
        """What a file tool of the run did to its taint: a listing or a read is somebody
        else's words, a read of a private path private data; a write while the run holds
        private data marks the file in the sidecar. Called after the tool succeeded.

        A write marks the name it gave (``written.written_as``, from its folder descriptor,
        never ``path`` resolved again; one unlike ``path`` is recorded as a taint too).

        Raises:
            RecorderFailed: a taint could not be recorded.
        """
        from ..request.spec import new_action_id

        relative = os.path.normpath(path).lstrip("/")
        shown = "." if relative in ("", ".") else relative
        full = os.path.join(root, relative)
        if tool == "write":
            if self._holds_private():
                self._wrote(root, relative if written is None else written.path, written)
            return
        taints = [Taint("untrusted", f"file_{tool}", shown)]
        if tool == "read":  # the path read, and where its symlinks lead
            taints += self._private(dict.fromkeys((full, resolved.realpath(full))), root, profile)
        self._add(taints, f"file-{new_action_id()}", self.run_id, self._last_step())

    def _wrote(self, root: str, name: str, written: WriteResult | None) -> None:
        from ..request.spec import new_action_id

        got, step = name if written is None else written.written_as, self._last_step()
        with self._stored():
            self.files().mark(self._realpath(root), [got or name], run_id=self.run_id, step=step)
        if got != name:  # a folder moved during the write; None: out of the workspace
            taint = Taint("private", "private-file", f"{name}: written as {got!r}")
            self._add([taint], f"file-{new_action_id()}", self.run_id, step)

    def words(self, source: str, detail: str) -> None:
        """Somebody else's words that reached the run another way than a command or a file
        tool: ``source`` names the way (``skill``: a skill's instructions or a resource
        read through the skill tool), ``detail`` what it was.

        Raises:
            RecorderFailed: the taint could not be recorded.
        """
        from ..request.spec import new_action_id

        taint = Taint("untrusted", source, detail)
        self._add([taint], f"{source}-{new_action_id()}", self.run_id, self._last_step())

    def _last_step(self) -> int:
        with self._lock:
            step = self._step
        if step == 0 and self.recording.active:
            with self._stored():
                step = self._store().last_step(self.run_id)
        return step

    # --- shared --------------------------------------------------------------------------

    def files(self) -> PrivateFiles:
        """The sidecar of files marked private (in the store)."""
        if self._files is None:
            from ..record.taint import PrivateFiles

            self._files = PrivateFiles(self._store())
        return self._files

    def _private(
        self, paths: Iterable[str], workspace: str, profile: Profile, *, own: bool = False
    ) -> list[Taint]:
        """The private taints of reading ``paths`` (absolute, normalised); ``own``: the
        command's folder, which counts only when it is inside a private path."""
        roots = dict.fromkeys((os.path.normpath(workspace), self._realpath(workspace)))
        taints: list[Taint] = []
        inside: dict[str, None] = {}
        for path in paths:
            found = (relative_to(path, w) for w in roots)
            relative = next((r for r in found if r is not None), None)
            if relative is not None and os.path.lexists(path):  # nothing to read otherwise
                inside.setdefault(relative, None)
            glob = matches(path, relative, profile.private, folders=not own)
            if glob is not None:
                shown = path if relative is None else relative or "."
                taints.append(Taint("private", "private-path", f"{shown} ({glob})"))
        if inside and not own:
            with self._stored():
                marked = self.files().named(self._realpath(workspace), inside)
                taints += [Taint("private", "private-file", path) for path in marked]
        return taints

    def _realpath(self, workspace: str) -> str:
        """The workspace's real path, the sidecar's key for it (resolved once a run)."""
        found = self._real.get(workspace)
        if found is None:
            found = self._real[workspace] = resolved.realpath(workspace)
        return found

    @contextlib.contextmanager
    def _stored(self) -> Iterator[None]:
        """A store (the sidecar, the record read back) that cannot be used refuses the
        step, or (``store.fail_closed = false``, as for the record) is a warning, and only
        what this process saw counts."""
        from ..record.store import StoreError

        try:
            yield
        except StoreError as error:
            if self.fail_closed:
                raise
            print(f"stockade: warning: the breaker's store: {error}", file=sys.stderr)

    def _add(self, taints: list[Taint], action_id: str, run_id: str, step: int) -> None:
        """Count ``taints`` and record each one the run did not already hold."""
        self._record(self._count(taints, run_id), action_id, run_id, step)

    def _count(self, taints: list[Taint], run_id: str) -> list[Taint]:
        """Count ``taints`` in this process when they are the run's own; the ones to record
        (new to the run, or of another run: a held step this host released)."""
        new, tell = [], None
        with self._lock:
            for taint in dict.fromkeys(taints):
                if run_id != self.run_id:
                    new.append(taint)
                elif key(taint) not in self._taints:
                    self._taints[key(taint)] = taint
                    new.append(taint)
            if run_id == self.run_id:
                tell = self._newly_both()
        if tell is not None and self.on_both is not None:
            self.on_both(tell)  # before the step that tripped it is recorded, or shipped
        return new

    def _record(self, taints: list[Taint], action_id: str, run_id: str, step: int) -> None:
        for taint in taints:
            self.recording.taint(
                action_id,
                taint=taint.taint,
                source=taint.source,
                detail=taint.detail,
                run_id=run_id,
                step=step,
            )


def _shown(argv: Iterable[str]) -> str:
    from ..display import command

    return command(argv)
